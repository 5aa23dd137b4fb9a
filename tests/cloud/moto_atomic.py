"""Run a moto S3 server whose conditional PUT is atomic, like real S3's.

moto checks ``If-None-Match: *`` and then stores the object without a lock,
so two racing creators can both win (measured: about 1 round in 2000 for
small objects; see shared notes). Real S3 never lets that happen, and mere's
tests must not fail for moto's race. This launcher serialises moto's
``put_object`` handler with one lock, creates the requested buckets, then
runs moto's normal server (threaded werkzeug).

    python moto_atomic.py --host 127.0.0.1 --port PORT --bucket NAME [--bucket NAME...]

It exits when its parent process dies (checked every half second), so a
killed test run leaves no server behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import warnings


def _exit_with_parent(parent: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", action="append", default=[])
    args = parser.parse_args()
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    warnings.simplefilter("ignore")  # moto's own deprecation noise; this is not the test process

    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.s3.responses import S3Response
    from moto.server import main as moto_main

    lock = threading.Lock()
    original = S3Response.put_object

    def atomic_put_object(self: S3Response) -> object:
        with lock:
            return original(self)

    S3Response.put_object = atomic_put_object  # type: ignore[method-assign]
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for bucket in args.bucket:
        backend.create_bucket(bucket, "us-east-1")
    sys.stdout.flush()
    moto_main(["-H", args.host, "-p", str(args.port)])


if __name__ == "__main__":
    main()
