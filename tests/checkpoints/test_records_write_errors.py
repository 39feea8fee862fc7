"""A record file that cannot be written names itself in the error.

`os.write` and `os.fsync` raise an OSError that names no file (EIO, ENOSPC, EROFS, EFBIG); the
CLI's error line would then say only "Read-only file system". The pending record is written
here past a real file-size limit (RLIMIT_FSIZE: the kernel refuses the write with EFBIG).
"""

from __future__ import annotations

import errno
import resource
import signal
from pathlib import Path

import pytest
from test_records import _record  # tests/checkpoints is on pytest's `pythonpath`

from ckpt.checkpoints.history.records import RecordDir, record_row


def test_a_failed_pending_write_names_the_pending_file(tmp_path: Path) -> None:
    records = RecordDir(str(tmp_path / "records"), fsync=False)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG rather than a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))
    try:
        with pytest.raises(OSError) as caught:
            records.write_pending(record_row(_record("ckpt-1-abc")), [b"a/b"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert caught.value.errno == errno.EFBIG
    assert caught.value.filename is not None
    assert Path(caught.value.filename).parent == tmp_path / "records"
    assert list((tmp_path / "records").iterdir()) == []  # the partial pending file is gone
