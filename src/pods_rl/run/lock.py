"""One process per folder: a lock file that names the process training a run folder (`run.lock`, taken by `pods
train`) or a comparison folder (`compare.lock`, taken by `pods compare`), so that a second process refuses the folder
in one line instead of training beside the first and rewriting its records.

The file holds a JSON record: the process id, its host and when it started (and what else the owner adds). The owner
holds an exclusive `flock` on it, which the system drops when the process dies, however it dies, so taking the lock is
atomic between processes of one machine. A lock counts as held while its file is flock'ed or a process it names is
alive on this host; a record written on another host cannot be checked from here and counts as held. A record whose
processes are all gone is stale: it is taken over, and the caller says so.

Not guaranteed (docs/reliability.md): a folder on a network filesystem (whether flock reaches other machines depends
on the filesystem), a process id reused by an unrelated process (the lock then looks held; the message says how to
remove it). POSIX only (`fcntl`).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from pods_rl.run.settings import SettingsError

RUN_LOCK = "run.lock"
HOST = socket.gethostname()


def alive(pid: int | None) -> bool:
    """Whether another process with this id exists on this machine."""
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class FolderLock:
    """The lock of one folder. `acquire` takes it (or raises SettingsError naming the process that holds it),
    `release` gives it back and removes the file; `check` only looks. Subclasses name further process ids to check
    (`pid_fields`) and word the refusal (`busy_message`)."""

    pid_fields: tuple[str, ...] = ("pid",)

    def __init__(self, folder: Path, name: str = RUN_LOCK):
        self.path = Path(folder) / name
        self.record: dict[str, Any] = {
            "pid": os.getpid(),
            "host": HOST,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        self._fd: int | None = None  # the open, flock'ed lock file while held
        self._made_folder = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def holder(self) -> dict[str, Any] | None:
        """The record of the live process holding the folder ({} while its record is being written), else None."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError:  # no lock file (or one this user may not open: `acquire` then says so)
            return None
        try:
            record = _read(fd)
            if not _try_lock(fd):  # another process holds it now
                return record or {}
        finally:
            os.close(fd)  # and with it this probe's lock
        return record if record is not None and self._alive(record) else None

    def check(self, option: str) -> None:
        """Raise SettingsError (one line) when another live process holds the folder."""
        record = self.holder()
        if record is not None:
            raise SettingsError(self.busy_message(option, record))

    def acquire(self, option: str = "--output-dir") -> dict[str, Any] | None:
        """Take the lock, creating the folder if it does not exist; returns the stale record it took over (its
        processes gone), if any. Raises SettingsError (one line) when another live process holds it."""
        try:
            fd = self._open()
        except OSError as error:  # a folder this user may not write to
            raise SettingsError(
                f"{option} {self.path.parent}: cannot create its lock file {self.path}: {error}"
            ) from None
        while True:
            if not _try_lock(fd):
                record = _read(fd)
                os.close(fd)
                raise SettingsError(self.busy_message(option, record or {}))
            if _same_file(fd, self.path):
                break
            os.close(fd)  # released and removed between our open and our lock: open the new file
            fd = self._open()
        previous = _read(fd)
        if previous is not None and self._alive(previous):
            os.close(fd)
            raise SettingsError(self.busy_message(option, previous))
        self._fd = fd
        self._write()
        return previous

    def _open(self) -> int:
        if not self.path.parent.exists():
            self.path.parent.mkdir(parents=True)
            self._made_folder = True
        return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def update(self, **fields: Any) -> None:
        """Add `fields` to the record while the lock is held."""
        if self.held:
            self.record.update(fields)
            self._write()

    def release(self) -> None:
        """Remove the lock file and give the lock back; a folder that `acquire` created and nothing filled is
        removed too, so that a start that failed leaves nothing behind."""
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
        if self._made_folder:
            with suppress(OSError):  # not empty: the run wrote into it
                self.path.parent.rmdir()

    def busy_message(self, option: str, record: dict[str, Any]) -> str:
        return (
            f"{option} {self.path.parent}: {_process(record)} is training this run folder; stop it first, or remove "
            f"{self.path} if no such process runs."
        )

    def stale_message(self, record: dict[str, Any]) -> str:
        """The warning line for a stale lock taken over."""
        return f"{self.path} named {_process(record)}, which is gone: its lock is taken over."

    def _alive(self, record: dict[str, Any]) -> bool:
        if record.get("host", HOST) != HOST:  # another machine's process: it cannot be checked from here
            return True
        return any(alive(record.get(field)) for field in self.pid_fields)

    def _write(self) -> None:
        assert self._fd is not None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps(self.record).encode(), 0)


def _process(record: dict[str, Any]) -> str:
    """'process 123 on host h (since 2026-01-02 10:00:00)', from what the record holds."""
    if "pid" not in record:
        return "another process"
    host = f" on host {record['host']}" if "host" in record else ""
    since = f" (since {record['started']})" if "started" in record else ""
    return f"process {record['pid']}{host}{since}"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _read(fd: int) -> dict[str, Any] | None:
    """The record in the lock file, or None when it is empty or not a record."""
    try:
        record = json.loads(os.pread(fd, 1 << 16, 0) or b"null")
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
