/*
 * A model of mere's commit protocol (docs/format.md §8 and §9), for the Spin
 * model checker. It sits next to the code it models: transaction.py (the
 * commit loop, rebase and conflict check) and ../log/log.py (put_commit:
 * put-if-absent and the resolution of ambiguous outcomes).
 * docs/format.md, "What the model proves", says what it proves and what not;
 * tests/verify/test_model.py runs it.
 *
 *   spin -a commit_protocol.pml && gcc -O2 -DSAFETY -DNOCLAIM -o pan pan.c && ./pan -m100000
 *   spin -a commit_protocol.pml && gcc -O2 -o pan pan.c && ./pan -a -N terminates
 *   spin -DNW=3 -DSMALL=1 -DAMBIG=0 -a ...     three writers racing
 *   spin -DNW=3 -DNK=1 -a ...                  three writers, ambiguous puts, one key
 *
 * What is modelled
 * ----------------
 * NW writers each run one transaction over NK abstract keys. A writer pins
 * the latest version it finds (any interleaving makes it as stale as a slow
 * client's), reads a nondeterministic set of keys at that snapshot, chooses
 * a nondeterministic non-empty set of keys to write, and races for version
 * base+1 with an atomic create (put-if-absent) of log[v]. The log is bounded
 * to MAXV versions; a writer that runs out of versions gives up (aborts), as
 * RetriesExhausted does.
 *
 * The put may also go wrong, as object stores do (AMBIG times per writer at
 * most): land and report "already exists" (a client library's retry of a
 * create that landed) or an error (a dropped connection), or fail without
 * landing. Any response but success is resolved by reading log[v] back and
 * comparing commit ids: ours means committed, another's means lost; an
 * absent object means "send the same bytes again" (SENDS times at most). The
 * read-back can fail too: the outcome is then unknown (CommitOutcomeUnknown),
 * and the put may still land later (a request in flight).
 *
 * A writer that lost reads every commit after its base up to the latest and
 * checks each against its footprint: under serializable (the default) a
 * winner that wrote a key this transaction read or wrote is a conflict;
 * compiled with -DSNAPSHOT, only a key both wrote (two removals of the same
 * file). No conflict: rebase onto the latest version and race again.
 *
 * Mutants, which must fail (the tests check that the properties have teeth):
 *   -DSNAPSHOT     the snapshot rule: property 4 (serializability) fails;
 *   -DGUESS        an ambiguous response is taken as a loss without reading
 *                  back: a transaction told it failed is in the log (3);
 *   -DNO_READBACK  likewise for every non-success (3);
 *   -DOVERWRITE    the put replaces an existing commit, as a rename would:
 *                  a commit is lost (2).
 *
 * Properties (assertions checked once every writer is done, and the LTL
 * formula `terminates`):
 *   1. the log has no gap, and no version holds two commits (each log slot is
 *      created once, atomically, and never overwritten);
 *   2. no lost commit: a writer that believes it committed at v finds its
 *      commit id at log[v], and only there;
 *   3. a writer told it definitely failed has no commit in the log; one with
 *      an unknown outcome has at most one;
 *   4. serializability in log order (serializable rule): every commit's reads
 *      equal the state at its version - 1, so replaying the log in order gives
 *      every committed transaction the reads it had;
 *   5. every writer terminates.
 */

#ifndef NW
#define NW 2
#endif
#ifndef NK
#define NK 2
#endif
#ifndef MAXV
#define MAXV 4
#endif
#ifndef AMBIG
#define AMBIG 1
#endif
#ifndef SENDS
#define SENDS 2
#endif
/* SMALL 1: footprints of one key read and one key written (no transaction reads or
 * writes both keys), which keeps three writers tractable. */
#ifndef SMALL
#define SMALL 0
#endif

#define RUNNING   0
#define COMMITTED 1
#define ABORTED   2
#define UNKNOWN   3

#define OK     0
#define EXISTS 1
#define ERROR  2

/* log[v]: cid 0 means "not created"; version 0 is the initial state. */
byte logcid[MAXV + 1];
byte logw[MAXV + 1];     /* keys written by the commit at v (bit mask) */

byte status[NW];
byte cver[NW];           /* the version a writer believes it committed */
byte rmask[NW];
byte wmask[NW];
byte seen[NW * NK];      /* commit id of the last writer of each key read (0: initial) */
byte finished = 0;

ltl terminates { <> (finished == NW) }

/* The commit id of the last commit at or below `upto` that wrote key k (0: none). */
inline last_writer(k, upto, out, u) {
  out = 0;
  u = 1;
  do
  :: u <= upto -> if :: (logw[u] & (1 << k)) -> out = logcid[u] :: else fi; u++
  :: else -> break
  od
}

/* Version discovery: probe forward from 0 while the next version exists. */
inline latest(out) {
  out = 0;
  do
  :: out < MAXV && logcid[out + 1] != 0 -> out++
  :: else -> break
  od
}

/* After a lost race: check every commit after `base` up to the latest against the
 * footprint, in one step (committed versions are immutable; the latest is that of
 * some instant). Sets `conflict`, and moves `base` to the latest on success. */
inline rebase() {
  d_step {
    latest(top);
    conflict = false;
    u = base + 1;
    do
    :: u <= top && !conflict ->
#if defined(SNAPSHOT)
       if :: (logw[u] & wmask[me]) -> conflict = true :: else fi;
#else
       if :: (logw[u] & (wmask[me] | rmask[me])) -> conflict = true :: else fi;
#endif
       u++
    :: else -> break
    od;
    base = top;
    top = 0;
    u = 0
  }
}

proctype Writer(byte me) {
  byte cid = me + 1;
  byte base, v, top, u, k, val, sends, ambiguous;
  bool conflict;
  byte outcome;   /* what the writer concluded for the attempt at v */

  /* begin: pin the latest version found, choose the footprint, read the snapshot.
   * One atomic step: the snapshot is immutable, so when it is read does not matter,
   * and a probe of the growing log returns the latest version of some instant. */
  atomic {
    latest(base);
    /* footprint: any keys read (maybe none), at least one key written */
    if
    :: rmask[me] = 0
    :: rmask[me] = 1
    :: NK > 1 -> rmask[me] = 2
    :: NK > 1 && !SMALL -> rmask[me] = 3
    fi;
    if
    :: wmask[me] = 1
    :: NK > 1 -> wmask[me] = 2
    :: NK > 1 && !SMALL -> wmask[me] = 3
    fi;
    k = 0;
    do
    :: k < NK ->
       if
       :: (rmask[me] & (1 << k)) -> last_writer(k, base, val, u); seen[me * NK + k] = val
       :: else
       fi;
       k++
    :: else -> break
    od;
    k = 0; val = 0; u = 0
  }

  do
  :: base >= MAXV -> status[me] = ABORTED; break      /* out of versions: gives up */
  :: else ->
     v = base + 1;
     sends = 0;
put:
     /* The create-only put, with the outcomes a real store can produce, and the
      * read-back that resolves any response but success. When the object exists
      * after the put, the read-back's answer is fixed (log entries are immutable),
      * so it is taken in the same step; only "absent" leaves room for others. */
     atomic {
       if
       :: logcid[v] == 0 ->
          if
          :: logcid[v] = cid; logw[v] = wmask[me]; outcome = COMMITTED   /* success */
          :: ambiguous < AMBIG -> ambiguous++;
             logcid[v] = cid; logw[v] = wmask[me];  /* landed; "exists" or an error */
#if defined(GUESS) || defined(NO_READBACK)
             outcome = ABORTED                      /* guessed: lost */
#else
             outcome = COMMITTED                    /* read back: our commit id */
#endif
          :: ambiguous < AMBIG -> ambiguous++;      /* error: did not land */
#if defined(NO_READBACK)
             outcome = ABORTED
#else
             outcome = RUNNING                      /* read back: absent, send again */
#endif
          fi
       :: else ->
#if defined(OVERWRITE)
          logcid[v] = cid; logw[v] = wmask[me]; outcome = COMMITTED  /* a rename-style put */
#else
          outcome = ABORTED                         /* "exists", or an error: read back, lost */
#endif
       fi;
       if
       :: outcome != COMMITTED && ambiguous < AMBIG ->
          ambiguous++; outcome = UNKNOWN            /* the read-back fails as well */
       :: else
       fi
     }
     if
     :: outcome == COMMITTED -> status[me] = COMMITTED; cver[me] = v; break
     :: outcome == UNKNOWN -> status[me] = UNKNOWN; break
     :: outcome == RUNNING ->
        sends++;
        if
        :: sends < SENDS -> goto put
        :: else -> status[me] = UNKNOWN; break
        fi
     :: outcome == ABORTED ->
        rebase();
        if
        :: conflict -> status[me] = ABORTED; break
        :: else -> outcome = RUNNING; sends = 0
        fi
     fi
  od;
  /* An unknown outcome: the put may still be in flight and land later. */
  if
  :: status[me] == UNKNOWN ->
     atomic {
       if
       :: logcid[v] == 0 -> logcid[v] = cid; logw[v] = wmask[me]   /* it lands now */
       :: true -> skip                                              /* it never lands */
       fi
     }
  :: else -> skip
  fi;
  finished++
}

init {
  byte i, v, n, k, val, u, w;
  atomic {
    i = 0;
    do
    :: i < NW -> run Writer(i); i++
    :: else -> break
    od
  }
  (finished == NW);

  d_step {  /* the checks: one step, once every writer is done */
  /* 1. no gap: versions are created in order */
  v = 2;
  do
  :: v <= MAXV -> assert(logcid[v] == 0 || logcid[v - 1] != 0); v++
  :: else -> break
  od;

  i = 0;
  do
  :: i < NW ->
     n = 0;
     v = 1;
     do
     :: v <= MAXV -> if :: logcid[v] == i + 1 -> n++ :: else fi; v++
     :: else -> break
     od;
     /* 2. no lost commit, no commit twice */
     assert(status[i] != COMMITTED || (n == 1 && logcid[cver[i]] == i + 1));
     /* 3. a definite failure never landed; an unknown outcome landed at most once */
     assert(status[i] != ABORTED || n == 0);
     assert(status[i] != UNKNOWN || n <= 1);
     assert(status[i] != RUNNING);
     i++
  :: else -> break
  od;

  /* 4. serializable in log order: each commit read the state of the version below it */
  v = 1;
  do
  :: v <= MAXV && logcid[v] != 0 ->
     w = logcid[v] - 1;
     k = 0;
     do
     :: k < NK ->
        if
        :: (rmask[w] & (1 << k)) ->
           last_writer(k, v - 1, val, u);
           assert(val == seen[w * NK + k])
        :: else
        fi;
        k++
     :: else -> break
     od;
     v++
  :: else -> break
  od
  }
}
