"""Per-file membership filters of primary-key values (docs/format.md §6.1).

Checking that new keys are absent from a table would otherwise read the key
columns of every file whose statistics admit them, and random keys are
admitted by every file. A *key filter* is a Bloom filter of one data file's
key hashes, kept in an immutable sidecar object next to the file
(``<data file key>.keys``): a probe that finds none of the new keys in a
file's filter skips that file. A false positive only costs a read of the
file's key columns; a false negative cannot happen, since a filter is built
from the very key values the file holds and a probe hashes the same values
the same way.

Sidecars are written lazily, by the first key check that reads a committed
file's key columns (and so covers files of older versions, Spark and
compaction alike); nothing on the write path waits for them, and a file
without one is simply read. They never change, so a process keeps the ones
it has read or built in :data:`CACHE` (bounded by bytes) and a long-lived
writer probes its table without a request. Vacuum deletes a sidecar with its
data file (:func:`data_key_of`).

The hash of a key is defined over the value's *family*, so lossless widening
(``int32`` to ``int64``, ``float`` to ``double``) keeps a filter usable:

* integers (signed or unsigned, any width) and booleans: the value as a
  64-bit two's complement integer;
* ``float``/``double``: the IEEE double's bits, ``-0.0`` as ``0.0`` and every
  NaN as ``0x7FF8000000000000``;
* dates, times, timestamps, durations: the stored integer (family names the
  Arrow type, so a unit change makes the filter unusable, never wrong);
* other types: the first 8 bytes (little-endian) of BLAKE2b (digest 8) of the
  value's UTF-8 text (strings), bytes (binary) or ``str`` (decimals).

Column hashes combine as ``h = mix(h * 0x9E3779B97F4A7C15 + x)`` from ``h = 0``
over the key columns in key order, ``mix`` being SplitMix64's finalizer.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mere.errors import MereError, StorageError
from mere.storage import ObjectStore

#: The sidecar's name: the data file's key plus this suffix.
SUFFIX = ".keys"
MAGIC = b"MKF1"
#: Filter bits per key (4 keys per 256-bit block): a false-positive rate near
#: 5e-7 per key (measured; 3.5e-6 at 48 bits), so 1,000 absent keys pass a file's
#: filter about 0.05% of the time (a pass costs a read of the file's key columns,
#: which grows with the file: at 48 bits a 1,000-key check of a 175-file table read
#: a file for nothing every other time).
BITS_PER_KEY = 64
#: Keys per numpy step when building (bounds the (keys x 8) masks).
CHUNK = 1 << 18
#: Filters of up to this many bits are built in one step, from a plane of a byte per bit.
SMALL_PLANE = 1 << 22
#: Files with fewer rows get no sidecar (their filters live only in memory).
MIN_SIDECAR_ROWS = 4096
#: The most blocks a filter has (256 MiB); past ~33M keys in one file it fills up.
MAX_BLOCKS = 1 << 23
HASH_NAME = "mere-key-v1"

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NAN_BITS = np.uint64(0x7FF8000000000000)


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, elementwise over uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def family(type_: pa.DataType) -> str:
    """The hash family of a key type (equal families hash equal values alike)."""
    if pa.types.is_integer(type_) or pa.types.is_boolean(type_):
        return "int"
    if pa.types.is_floating(type_):
        return "float"
    if pa.types.is_temporal(type_):
        return str(type_)
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "string"
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_):
        return "binary"
    return str(type_)


def signature(fields: Sequence[pa.Field], physical: Sequence[str]) -> list[list[str]]:
    """What a filter is valid for: each key column's physical name and hash family."""
    return [[name, family(f.type)] for f, name in zip(fields, physical, strict=True)]


def _column_words(values: pa.Array) -> np.ndarray:
    """Each value's 64-bit word (see the module docstring), nulls as 0."""
    type_ = values.type
    if pa.types.is_boolean(type_):
        values = values.fill_null(False).cast(pa.uint8())
        type_ = values.type
    if pa.types.is_integer(type_):
        wide = pa.uint64() if pa.types.is_unsigned_integer(type_) else pa.int64()
        ints = values.cast(wide).fill_null(0).to_numpy(zero_copy_only=False)
        return np.ascontiguousarray(ints).view(np.uint64)
    if pa.types.is_floating(type_):
        doubles = values.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False) + 0.0
        words = doubles.view(np.uint64).copy()  # + 0.0 made every -0.0 a 0.0
        words[np.isnan(doubles)] = _NAN_BITS
        return words
    if pa.types.is_temporal(type_):
        storage = pa.int32() if type_.bit_width == 32 else pa.int64()
        ints = values.view(storage).cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        return np.ascontiguousarray(ints).view(np.uint64)
    out = np.zeros(len(values), dtype=np.uint64)
    for i, value in enumerate(values.to_pylist()):
        if value is None:
            continue
        if isinstance(value, str):
            data = value.encode()
        elif isinstance(value, bytes):
            data = value
        else:
            data = str(value).encode()
        out[i] = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return out


def key_hashes(keys: pa.Table) -> np.ndarray:
    """One 64-bit hash per row of ``keys`` (its columns in key order); read-only.

    A statement's new keys are hashed by its duplicate check, its key check
    and the filter of the file it wrote, each from the same Arrow buffers:
    the hashes of the last few key tables (up to :data:`MEMO_ROWS` rows) are
    kept, found again by the identity of the memory they were computed from.
    """
    if keys.num_rows == 0 or keys.num_rows > MEMO_ROWS:
        return _hashes(keys)
    identity, chunks = _identity(keys)
    with _MEMO_LOCK:
        found = _MEMO.get(identity)
        if found is not None:
            _MEMO.move_to_end(identity)
            return found[1]
    hashes = _hashes(keys)
    hashes.flags.writeable = False
    with _MEMO_LOCK:
        _MEMO[identity] = (chunks, hashes)  # the chunks kept: their memory is not reused
        while len(_MEMO) > MEMO_TABLES:
            _MEMO.popitem(last=False)
    return hashes


def _hashes(keys: pa.Table) -> np.ndarray:
    h = np.zeros(keys.num_rows, dtype=np.uint64)
    for column in keys.columns:
        words = _column_words(column.combine_chunks())
        h = _mix(h * _GOLDEN + words)
    return h


def _identity(keys: pa.Table) -> tuple[tuple[object, ...], list[pa.Array]]:
    """What makes two key tables the same values: per column its type, and per chunk
    its offset, length and buffer addresses (Arrow buffers never change)."""
    parts: list[object] = []
    chunks: list[pa.Array] = []
    for column in keys.columns:
        parts.append(column.type)
        for chunk in column.chunks:
            chunks.append(chunk)
            addresses = tuple(0 if b is None else b.address for b in chunk.buffers())
            parts.append((chunk.offset, len(chunk), addresses))
    return tuple(parts), chunks


#: Key tables of up to this many rows have their hashes kept (:func:`key_hashes`).
MEMO_ROWS = 1 << 16
#: How many key tables' hashes are kept.
MEMO_TABLES = 8
_MEMO: OrderedDict[tuple[object, ...], tuple[list[pa.Array], np.ndarray]] = OrderedDict()
_MEMO_LOCK = threading.Lock()


_SALTS = np.array(
    [
        0x47B6137B,
        0x44974D91,
        0x8824AD5B,
        0xA2B7289D,
        0x705495C7,
        0x2DF1424B,
        0x9EFC4947,
        0x5C6BFB31,
    ],
    dtype=np.uint32,
)
#: The first bit of each 32-bit word of a block, in a plane of a block's 256 bits.
_WORD_BASES = np.arange(8, dtype=np.int64) * 32


@dataclass(frozen=True)
class Probe:
    """A set of keys ready to test against any number of filters.

    For a key hash ``h``: its block selector is ``h >> 32`` and its mask in a
    block has, in 32-bit word ``i``, the bit ``((h mod 2^32) * SALT[i] mod
    2^32) >> 27`` (Parquet's split-block Bloom filter, over mere's hash).
    """

    selectors: np.ndarray  # uint64, one per key
    masks: np.ndarray  # (keys x 8) uint32

    @classmethod
    def of(cls, hashes: np.ndarray) -> Probe:
        low = (hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        bits = (low[:, None] * _SALTS[None, :]) >> np.uint32(27)
        return cls(hashes >> np.uint64(32), np.left_shift(np.uint32(1), bits))

    def blocks(self, count: int) -> np.ndarray:
        """Each key's block among ``count`` blocks: ``(selector * count) >> 32``."""
        out: np.ndarray = ((self.selectors * np.uint64(count)) >> np.uint64(32)).view(np.int64)
        return out

    def __len__(self) -> int:
        return len(self.selectors)


class CorruptKeyFilter(MereError):
    """A sidecar that does not decode; the caller reads the data file instead."""


@dataclass(frozen=True)
class KeyFilter:
    """A split-block Bloom filter over one data file's key hashes: 256-bit blocks."""

    signature: list[list[str]]
    rows: int
    words: np.ndarray  # (blocks x 8) uint32

    @classmethod
    def build(cls, signature: list[list[str]], hashes: np.ndarray) -> KeyFilter:
        """The filter of ``hashes`` (see :func:`key_hashes`)."""
        count = min(MAX_BLOCKS, max(1, -(-len(hashes) * BITS_PER_KEY // 256)))
        low = (hashes & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        first = ((hashes >> np.uint64(32)) * np.uint64(count)) >> np.uint64(32)
        if count * 256 <= SMALL_PLANE:
            # All eight words at once: each key's bits as bytes of a (blocks x 256) plane.
            bits = (low[:, None] * _SALTS[None, :]) >> np.uint32(27)
            where = first.astype(np.int64)[:, None] * 256 + _WORD_BASES[None, :] + bits
            plane = np.zeros(count * 256, dtype=np.bool_)
            plane[where.reshape(-1)] = True
            packed = np.packbits(plane.reshape(count * 8, 32), axis=1, bitorder="little")
            words = packed.view("<u4").reshape(count, 8).astype(np.uint32, copy=False)
            return cls(signature, len(hashes), words)
        words = np.empty((count, 8), dtype=np.uint32)
        # Word by word: each key sets one of the word's 32 bits in its block. The bits are
        # set as bytes of a (blocks x 32) plane, then packed (``bitwise_or.at`` over the
        # keys' masks is several times slower); the plane costs 8 bytes per key at most.
        base = first.astype(np.int64) * 32
        plane = np.empty(count * 32, dtype=np.bool_)
        for i, salt in enumerate(_SALTS):
            plane[:] = False
            for start in range(0, len(hashes), CHUNK):
                bits = (low[start : start + CHUNK] * salt) >> np.uint32(27)
                plane[base[start : start + CHUNK] + bits] = True
            packed = np.packbits(plane.reshape(count, 32), axis=1, bitorder="little")
            words[:, i] = packed.view("<u4").reshape(count)
        return cls(signature, len(hashes), words)

    def may_contain(self, probe: Probe) -> np.ndarray:
        """Per key of ``probe``: False if the file certainly holds no such key."""
        masks = probe.masks
        out: np.ndarray = ((self.words[probe.blocks(len(self.words))] & masks) == masks).all(axis=1)
        return out

    def to_bytes(self) -> bytes:
        """The sidecar: MAGIC, a little-endian u32 header length, the JSON header, the bits."""
        bits = self.words.astype("<u4", copy=False).tobytes()
        header = json.dumps(
            {
                "hash": HASH_NAME,
                "columns": self.signature,
                "rows": self.rows,
                "blocks": len(self.words),
                "crc32": zlib.crc32(bits),
            },
            separators=(",", ":"),
        ).encode()
        return MAGIC + struct.pack("<I", len(header)) + header + bits

    @classmethod
    def from_bytes(cls, data: bytes) -> KeyFilter:
        """Decode a sidecar.

        Raises:
            CorruptKeyFilter: not a sidecar this version writes, or its bits are not
                the ones its header's checksum names (a sidecar is put without
                waiting for the disk: bits lost would rule out keys the file holds).
        """
        try:
            if data[:4] != MAGIC:
                raise ValueError("bad magic")
            (length,) = struct.unpack_from("<I", data, 4)
            header = json.loads(data[8 : 8 + length])
            count = int(header["blocks"])
            raw = np.frombuffer(data, dtype="<u4", offset=8 + length)
            if header["hash"] != HASH_NAME or count <= 0 or len(raw) != count * 8:
                raise ValueError("unknown hash or wrong size")
            if header.get("crc32") != zlib.crc32(memoryview(data)[8 + length :]):
                raise ValueError("its bits do not match its checksum (or it has none)")
            words = raw.astype(np.uint32, copy=False).reshape(count, 8)  # read-only: fine
            return cls([list(c) for c in header["columns"]], int(header["rows"]), words)
        except (ValueError, KeyError, TypeError, struct.error) as exc:
            raise CorruptKeyFilter(f"not a key filter: {exc}") from None

    @property
    def nbytes(self) -> int:
        return int(self.words.nbytes)


def sidecar_key(data_key: str) -> str:
    """The sidecar object of a data file's object key."""
    return data_key + SUFFIX


def data_key_of(key: str) -> str:
    """The data file a sidecar belongs to (``key`` itself if it is not a sidecar)."""
    return key[: -len(SUFFIX)] if key.endswith(SUFFIX) else key


@dataclass
class _Entry:
    offset: int  # first block in the arena
    blocks: int
    rows: int
    signature: list[list[str]]
    saved: bool


@dataclass(frozen=True)
class Located:
    """Where some cached filters sit in a :class:`FilterCache`'s arena, as of ``generation``.

    Per object asked for: its first block (-1: no filter of the signature is
    cached) and its number of blocks; and which of them are cached unsaved.
    """

    generation: int
    offsets: np.ndarray  # int64
    blocks: np.ndarray  # int64
    unsaved: list[int]


class FilterCache:
    """Filters this process has read or built, by (store, object key); bounded by bytes.

    Sidecars never change once written, so an entry never goes stale. An
    entry built for a file not yet committed is *unsaved*: its sidecar is
    written when a check first meets the file committed (:func:`load`).

    Every filter's blocks live in one *arena* (an array of blocks, filled in
    order), so :meth:`probe` tests a set of keys against many files' filters in
    a few numpy operations instead of a call per file. A region of the arena is
    never written again once filled (the :class:`KeyFilter` views handed out
    stay valid); when the arena is full its live entries move to a new one,
    twice as large as they need.

    Where filters sit can be looked up once and kept (:meth:`locate`, then
    :meth:`probe_at` any number of times): :attr:`generation` changes whenever
    an entry moves, goes or is replaced, and a location is only used at the
    generation it was found in.
    """

    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._bytes = 0
        self._arena = np.zeros((0, 8), dtype=np.uint32)
        self._used = 0  # blocks of the arena filled (live or not)
        self._lock = threading.Lock()
        self._generation = 0
        self._work = _Workspace()

    @property
    def generation(self) -> int:
        return self._generation

    def get(self, store: ObjectStore, key: str) -> tuple[KeyFilter, bool] | None:
        """The filter and whether its sidecar exists (None: not cached)."""
        with self._lock:
            entry = self._entries.get((store.uri, key))
            if entry is None:
                return None
            self._entries.move_to_end((store.uri, key))
            return self._filter(entry), entry.saved

    def _filter(self, entry: _Entry) -> KeyFilter:
        words = self._arena[entry.offset : entry.offset + entry.blocks]
        return KeyFilter(entry.signature, entry.rows, words)

    def put(self, store: ObjectStore, key: str, flt: KeyFilter, *, saved: bool = True) -> None:
        with self._lock:
            old = self._entries.pop((store.uri, key), None)
            if old is not None:
                self._bytes -= old.blocks * 32
                self._generation += 1
            if flt.nbytes > self.max_bytes:
                return
            blocks = len(flt.words)
            if self._used + blocks > len(self._arena):
                self._move(blocks)
            self._arena[self._used : self._used + blocks] = flt.words
            self._entries[(store.uri, key)] = _Entry(
                self._used, blocks, flt.rows, flt.signature, saved
            )
            self._used += blocks
            self._bytes += flt.nbytes
            while self._bytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self._bytes -= dropped.blocks * 32
                self._generation += 1

    def _move(self, more: int) -> None:
        """Move the live entries to a new arena with room for ``more`` blocks, and as many again."""
        live = self._bytes // 32
        arena = np.zeros((max(1024, 2 * (live + more)), 8), dtype=np.uint32)
        used = 0
        for entry in self._entries.values():
            arena[used : used + entry.blocks] = self._arena[
                entry.offset : entry.offset + entry.blocks
            ]
            entry.offset = used
            used += entry.blocks
        self._arena, self._used = arena, used
        self._generation += 1

    def reserve(self, blocks: int) -> None:
        """Make room for ``blocks`` more blocks at once (filters about to be put together)."""
        with self._lock:
            if self._used + blocks > len(self._arena):
                self._move(blocks)

    def mark_saved(self, store: ObjectStore, key: str) -> None:
        with self._lock:
            entry = self._entries.get((store.uri, key))
            if entry is not None:
                entry.saved = True

    def locate(
        self, store: ObjectStore, keys: Sequence[str], signature: list[list[str]]
    ) -> Located:
        """Where the cached filters of ``signature`` of the objects ``keys`` sit, now."""
        offsets = np.full(len(keys), -1, dtype=np.int64)
        blocks = np.zeros(len(keys), dtype=np.int64)
        unsaved: list[int] = []
        with self._lock:
            for i, key in enumerate(keys):
                entry = self._entries.get((store.uri, key))
                if entry is None or entry.signature != signature:
                    continue
                self._entries.move_to_end((store.uri, key))
                if not entry.saved:
                    unsaved.append(i)
                offsets[i] = entry.offset
                blocks[i] = entry.blocks
            return Located(self._generation, offsets, blocks, unsaved)

    def probe_at(
        self,
        generation: int,
        offsets: np.ndarray,
        blocks: np.ndarray,
        probe: Probe,
        unions: Sequence[Unions] | None = None,
    ) -> np.ndarray | None:
        """Per filter located at ``generation`` (``offsets`` >= 0, with their ``blocks``): 1
        if it may hold one of ``probe``'s keys, else 0; None if the generation has passed.

        ``unions`` of some of these filters (their positions here) rule keys out
        for all their members at once (:class:`Unions`).
        """
        with self._lock:
            if generation != self._generation:
                return None
            if len(offsets) == 0 or len(probe) == 0:
                return np.zeros(len(offsets), dtype=np.int8)
            if unions:
                return _probe_unions(self._arena, offsets, blocks, probe, unions, self._work)
            return _probe_blocks(self._arena, offsets, blocks, probe, self._work)

    def words_at(self, generation: int, offset: int, blocks: int) -> np.ndarray | None:
        """The words of the filter located at ``generation`` (None if it has passed)."""
        with self._lock:
            if generation != self._generation:
                return None
            return self._arena[offset : offset + blocks]

    def probe(
        self,
        store: ObjectStore,
        keys: Sequence[str],
        signature: list[list[str]],
        probe: Probe,
    ) -> tuple[np.ndarray, list[int]]:
        """Test ``probe``'s keys against the cached filters of the objects ``keys``, at once.

        Returns, per object, 1 if its filter may hold one of the keys, 0 if it
        holds none, -1 if no filter of ``signature`` is cached; and the indices
        of the objects whose cached filter is unsaved.
        """
        while True:
            found = self.locate(store, keys, signature)
            known = np.flatnonzero(found.offsets >= 0)
            hits = self.probe_at(found.generation, found.offsets[known], found.blocks[known], probe)
            if hits is not None:
                status = np.full(len(keys), -1, dtype=np.int8)
                status[known] = hits
                return status, found.unsaved

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self._arena = np.zeros((0, 8), dtype=np.uint32)
            self._used = 0
            self._generation += 1


#: (filters x keys) pairs tested per numpy step of :func:`_probe_blocks`: its buffers
#: (17 bytes a pair) are reused from call to call and stay within a core's cache.
PROBE_PAIRS = 1 << 16


class _Workspace:
    """The buffers :func:`_probe_blocks` works in, kept between calls (a fresh array of
    a megabyte costs its page faults on every call)."""

    def __init__(self) -> None:
        self.where = np.empty(0, dtype=np.int64)
        self.words = np.empty(0, dtype=np.uint64)
        self.equal = np.empty(0, dtype=np.bool_)

    def get(self, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = rows * cols
        if len(self.where) < n:
            self.where = np.empty(n, dtype=np.int64)
            self.words = np.empty(n, dtype=np.uint64)
            self.equal = np.empty(n, dtype=np.bool_)
        shape = (rows, cols)
        return (
            self.where[:n].reshape(shape),
            self.words[:n].reshape(shape),
            self.equal[:n].reshape(shape),
        )


def _probe_blocks(
    arena: np.ndarray,
    offsets: np.ndarray,
    counts: np.ndarray,
    probe: Probe,
    work: _Workspace | None = None,
) -> np.ndarray:
    """Per filter (the blocks ``offsets[i]`` to ``offsets[i] + counts[i]`` of the arena): 1 if
    it may hold one of ``probe``'s keys, else 0."""
    found, _ = _hits(arena.view(np.uint64).reshape(-1), offsets, counts, probe, work)
    out = np.zeros(len(offsets), dtype=np.int8)
    out[found] = 1
    return out


def _hits(
    flat: np.ndarray,
    offsets: np.ndarray,
    counts: np.ndarray | int,
    probe: Probe,
    work: _Workspace | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The (filter, key) pairs whose key the filter may hold: two arrays of indices.

    Filter ``i`` is the blocks ``offsets[i]`` to ``offsets[i] + counts[i]`` of
    ``flat`` (blocks as four 64-bit words each, two 32-bit words in each;
    ``counts`` an int: all of that size). The first word is tested for every
    (filter, key) pair, which rules out all but a few percent of the pairs of
    absent keys, and the other three one after the other for the pairs left.
    Each key's block is computed once per distinct filter size (64-bit multiplies are the slow
    part; files of one size, the common case, share them).
    """
    work = work if work is not None else _Workspace()
    masks = np.ascontiguousarray(probe.masks).view(np.uint64)  # (keys x 4)
    first = masks[:, 0]
    n = len(probe)
    offsets = np.asarray(offsets, dtype=np.int64)
    if isinstance(counts, int):
        sizes, size_of = np.array([counts], dtype=np.uint64), None
    else:
        sizes, size_of = np.unique(np.asarray(counts, dtype=np.uint64), return_inverse=True)
        size_of = size_of.reshape(-1)
    # Each key's first 64-bit word within a filter of each size.
    starts = (np.multiply.outer(sizes, probe.selectors) >> np.uint64(32)).view(np.int64) << 2
    bases = offsets << 2
    filters: list[np.ndarray] = []
    keys: list[np.ndarray] = []
    per = max(1, PROBE_PAIRS // max(n, 1))
    for start in range(0, len(offsets), per):
        stop = min(len(offsets), start + per)
        where, words, equal = work.get(stop - start, n)
        if size_of is None or len(sizes) == 1:
            np.add(bases[start:stop, None], starts[0][None, :], out=where)
        else:
            np.take(starts, size_of[start:stop], axis=0, out=where, mode="clip")
            where += bases[start:stop, None]
        np.take(flat, where, out=words, mode="clip")
        words &= first
        np.equal(words, first, out=equal)
        maybe = np.flatnonzero(equal)
        key = maybe % n
        held = _held(flat, where.reshape(-1)[maybe], key, masks, 1)
        filters.append(start + maybe[held] // n)
        keys.append(key[held])
    if not filters:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if len(filters) == 1:
        return filters[0], keys[0]
    return np.concatenate(filters), np.concatenate(keys)


#: Four true bytes read as one 32-bit word (either byte order): a block's four words held.
_ALL_HELD = np.frombuffer(b"\x01\x01\x01\x01", dtype=np.uint32)[0]


def _block_hits(
    flat: np.ndarray, offsets: np.ndarray, counts: np.ndarray, probe: Probe
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_hits`, testing whole blocks at once (a block's four words are one row of
    32 bytes): for unions, whose first words rule out too few pairs (half their bits
    are set) for a word-at-a-time test to pay, and for a few filters (fewer steps)."""
    masks = np.ascontiguousarray(probe.masks).view(np.uint64)  # (keys x 4)
    n = len(probe)
    sizes = np.asarray(counts, dtype=np.uint64)[:, None]
    where = ((sizes * probe.selectors[None, :]) >> np.uint64(32)).view(np.int64)
    where += np.asarray(offsets, dtype=np.int64)[:, None]
    words = np.take(flat.reshape(-1, 4), where, axis=0)  # (filters x keys x 4)
    words &= masks
    same = np.ascontiguousarray(words == masks)
    held = np.flatnonzero(same.view(np.uint32).reshape(-1) == _ALL_HELD)
    return held // n, held % n


def _held(
    flat: np.ndarray, at: np.ndarray, keys: np.ndarray, masks: np.ndarray, start: int = 0
) -> np.ndarray:
    """Per pair (the block whose first 64-bit word is ``flat[at[j]]``, key ``keys[j]``): whether
    the block holds the key's bits in its words ``start`` to 3, tested a word at a time
    for the pairs left."""
    left = np.arange(len(at))
    for word in range(start, 4):
        if len(left) == 0:
            break
        wanted = masks[keys[left], word]
        left = left[(flat[at[left] + word] & wanted) == wanted]
    held = np.zeros(len(at), dtype=np.bool_)
    held[left] = True
    return held


#: Filters of one size are also probed in unions of this many (:class:`Unions`).
UNION_FILES = 8


@dataclass(frozen=True)
class Unions:
    """Unions of filters of one size, to rule keys out for all their members at once.

    A union is the bitwise OR of its members' filters (:data:`UNION_FILES`
    files of ``blocks`` blocks each): it may hold every key one of them may
    hold, so a key it rules out is ruled out for all of them. About 12% of a
    filter's bits are set, and about 3% of absent keys pass a union of eight;
    a check tests the unions, then each member only for the keys that passed
    its union: about a fifth of the (filter, key) pairs of testing every filter.

    ``words`` holds the unions one after the other; ``members[u]`` are union
    ``u``'s members' positions among the filters probed (-1: none).
    """

    blocks: int
    words: np.ndarray  # (unions * blocks) x 8 uint32
    members: np.ndarray  # unions x UNION_FILES, int64

    @staticmethod
    def union(filters: Sequence[np.ndarray]) -> np.ndarray:
        """The union of filters of one size (their blocks' words)."""
        out: np.ndarray = filters[0].copy()
        for more in filters[1:]:
            out |= more
        return out


def _probe_unions(
    arena: np.ndarray,
    offsets: np.ndarray,
    counts: np.ndarray,
    probe: Probe,
    unions: Sequence[Unions],
    work: _Workspace,
) -> np.ndarray:
    """:func:`_probe_blocks`, with the filters ``unions`` have members of tested through them."""
    flat = arena.view(np.uint64).reshape(-1)
    masks = np.ascontiguousarray(probe.masks).view(np.uint64)
    out = np.zeros(len(offsets), dtype=np.int8)
    covered = np.zeros(len(offsets), dtype=np.bool_)
    files: list[np.ndarray] = []
    keys: list[np.ndarray] = []
    for group in unions:
        count = len(group.members)
        covered[group.members[group.members >= 0]] = True
        if count == 0:
            continue
        stacked = group.words.view(np.uint64).reshape(-1)
        starts = np.arange(count, dtype=np.int64) * group.blocks
        sizes = np.full(count, group.blocks, dtype=np.int64)
        passed, their = _block_hits(stacked, starts, sizes, probe)
        files.append(group.members[passed].reshape(-1))
        keys.append(np.repeat(their, group.members.shape[1]))
    if files:
        file, key = np.concatenate(files), np.concatenate(keys)
        file, key = file[file >= 0], key[file >= 0]
        blocks = (counts[file].astype(np.uint64) * probe.selectors[key]) >> np.uint64(32)
        at = (offsets[file] + blocks.view(np.int64)) << 2
        out[file[_held(flat, at, key, masks)]] = 1
    rest = np.flatnonzero(~covered)
    if 0 < len(rest) <= FEW_FILTERS:
        found, _ = _block_hits(flat, offsets[rest], counts[rest], probe)
        out[rest[found]] = 1
    elif len(rest):
        out[rest] = _probe_blocks(arena, offsets[rest], counts[rest], probe, work)
    return out


#: Up to this many filters outside unions are tested a whole block at a time.
FEW_FILTERS = 16


#: The process's filters.
CACHE = FilterCache()


def load(store: ObjectStore, data_key: str) -> KeyFilter | None:
    """The filter of a committed data file: cached, else its sidecar (None if it has none).

    A filter this process built before the file was committed gets its
    sidecar written now. A sidecar that cannot be read or decoded counts as none.
    """
    found = CACHE.get(store, data_key)
    if found is not None:
        flt, saved = found
        if not saved:
            save(store, data_key, flt)
        return flt
    try:
        flt = KeyFilter.from_bytes(store.get(sidecar_key(data_key)))
    except (StorageError, CorruptKeyFilter):  # absent, unreadable or not ours: read the file
        return None
    CACHE.put(store, data_key, flt)
    return flt


def load_many(
    store: ObjectStore, data_keys: Sequence[str], *, threads: int = 8
) -> list[KeyFilter | None]:
    """:func:`load` for many files: the sidecars not cached are fetched in parallel
    (``threads`` requests at a time) and cached together."""
    found: list[KeyFilter | None] = [None] * len(data_keys)
    missing: list[int] = []
    for i, key in enumerate(data_keys):
        if CACHE.get(store, key) is not None:
            found[i] = load(store, key)
        else:
            missing.append(i)

    def fetch(i: int) -> KeyFilter | None:
        try:
            return KeyFilter.from_bytes(store.get(sidecar_key(data_keys[i])))
        except (StorageError, CorruptKeyFilter):  # absent, unreadable or not ours
            return None

    if len(missing) > 1:
        # One task per thread, each fetching its share in turn: a task per sidecar cost
        # more in hand-offs between threads than a local read does.
        lanes = min(threads, len(missing))
        shares = [missing[lane::lanes] for lane in range(lanes)]
        with ThreadPoolExecutor(max_workers=lanes) as pool:
            done = list(pool.map(lambda share: [fetch(i) for i in share], shares))
        found_at: dict[int, KeyFilter | None] = {}
        for share, got in zip(shares, done, strict=True):
            found_at.update(zip(share, got, strict=True))
        fetched = [found_at[i] for i in missing]
    else:
        fetched = [fetch(i) for i in missing]
    CACHE.reserve(sum(len(f.words) for f in fetched if f is not None))
    for i, flt in zip(missing, fetched, strict=True):
        if flt is not None:
            CACHE.put(store, data_keys[i], flt)
            found[i] = flt
    return found


def remember(store: ObjectStore, data_key: str, flt: KeyFilter, *, sidecar: bool = True) -> None:
    """Cache the filter of a file not committed yet.

    Its sidecar is written when a check first meets the file committed
    (:func:`load`, :func:`probe`), unless ``sidecar`` is False (an inlined
    file: no object, so nothing may be written beside it).
    """
    if CACHE.get(store, data_key) is None:
        CACHE.put(store, data_key, flt, saved=not sidecar)


def probe(
    store: ObjectStore, data_keys: Sequence[str], signature: list[list[str]], keys: Probe
) -> np.ndarray:
    """Test ``keys`` against the cached filters of committed data files, all at once.

    Returns per file 1 (its filter may hold one of the keys), 0 (it holds
    none) or -1 (no filter of ``signature`` is cached: ask :func:`load`).
    Filters cached unsaved get their sidecars written, as :func:`load` does.
    """
    status, unsaved = CACHE.probe(store, data_keys, signature, keys)
    for i in unsaved:
        found = CACHE.get(store, data_keys[i])
        if found is not None:
            save(store, data_keys[i], found[0])
    return status


def known(store: ObjectStore, data_key: str) -> bool:
    """Whether this process holds the file's filter."""
    return CACHE.get(store, data_key) is not None


def save(store: ObjectStore, data_key: str, flt: KeyFilter) -> None:
    """Write a committed data file's sidecar (best effort) and cache it.

    Files under :data:`MIN_SIDECAR_ROWS` rows get none: reading their key
    columns costs what reading a sidecar would. The write is a plain put (no
    create-only check, not made durable): a sidecar is a cache, every writer
    of it writes the same bytes (the filter of the same keys), and one lost or
    torn by a crash does not decode and is ignored. A store that refuses the
    write leaves the file without one; checks stay correct either way.
    """
    if CACHE.get(store, data_key) is None:
        CACHE.put(store, data_key, flt)
    else:
        CACHE.mark_saved(store, data_key)
    if flt.rows < MIN_SIDECAR_ROWS:
        return
    try:
        store.put(sidecar_key(data_key), flt.to_bytes())
    except StorageError:
        pass


__all__ = [
    "CACHE",
    "Probe",
    "SUFFIX",
    "CorruptKeyFilter",
    "FilterCache",
    "KeyFilter",
    "Located",
    "Unions",
    "data_key_of",
    "family",
    "key_hashes",
    "known",
    "load",
    "load_many",
    "probe",
    "remember",
    "save",
    "sidecar_key",
    "signature",
]
