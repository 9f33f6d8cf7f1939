"""Disks of a fixed size for hosted containers: a sparse ext4 image per database (its data) and per service
(its file cache), loop-mounted where the container's directory is.

Docker's overlay2 can only cap a container's size on xfs with project quotas; a loop-mounted filesystem
caps it anywhere, and a full disk fails writes with ENOSPC exactly as a full volume does. Images are sparse,
so a 10 GB disk costs only what is written. A disk grows (resize2fs) and keeps its data; it never shrinks,
as a shrink would need the data moved out first. The calls block: run them in a thread.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

GB = 1_000_000_000


class DiskError(RuntimeError):
    pass


def _run(*args: str) -> str:
    done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    text = done.stdout.strip()
    if done.returncode != 0:
        raise DiskError(f"{' '.join(args[:2])} failed: {text.splitlines()[-1] if text else done.returncode}")
    return text


def supported() -> str | None:
    """None when loop disks can be made here, else why not."""
    if os.geteuid() != 0:
        return "loop-mounted disks need root"
    missing = [t for t in ("mkfs.ext4", "e2fsck", "mount", "umount", "resize2fs") if shutil.which(t) is None]
    return f"missing {', '.join(missing)}" if missing else None


def size_of(mountpoint: Path) -> int:
    st = os.statvfs(mountpoint)
    return st.f_blocks * st.f_frsize


def free_bytes(mountpoint: Path) -> int:
    st = os.statvfs(mountpoint)
    return st.f_bavail * st.f_frsize


def ensure(image: Path, mountpoint: Path, size_gb: float) -> bool:
    """Make `mountpoint` a filesystem of `size_gb`; True if it was made or grown now.

    A grow is done unmounted (e2fsck, then resize2fs on the image): online resizing needs an ext4 ioctl
    that sandboxes often refuse. A disk still in use by a container is grown at its next full stop.
    """
    size = int(size_gb * GB)
    image.parent.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    changed = False
    if not image.exists():
        with open(image, "wb") as f:
            f.truncate(size)
        # No reserved blocks: the whole size is the workload's. Lazy init keeps a 10 GB mkfs under a second.
        _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(image))
        changed = True
    elif image.stat().st_size < size and _unmounted(mountpoint):
        with open(image, "r+b") as f:
            f.truncate(size)
        _run("e2fsck", "-f", "-p", str(image))
        _run("resize2fs", str(image))
        changed = True
    if not os.path.ismount(mountpoint):
        if any(mountpoint.iterdir()):  # data from before the disk (another runtime): move it onto the disk
            staging = mountpoint.with_name(mountpoint.name + ".disk")
            staging.mkdir(exist_ok=True)
            _run("mount", "-o", "loop", str(image), str(staging))
            try:
                # cp -a, not shutil.move: a move across filesystems copies without owners, and Postgres refuses
                # a data directory its user does not own.
                _run("cp", "-a", f"{mountpoint}/.", str(staging))
                for entry in list(mountpoint.iterdir()):
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
            finally:
                _run("umount", str(staging))
                staging.rmdir()
        _run("mount", "-o", "loop", str(image), str(mountpoint))
    return changed


def _unmounted(mountpoint: Path) -> bool:
    if not os.path.ismount(mountpoint):
        return True
    try:
        _run("umount", str(mountpoint))
    except DiskError:
        return False  # busy: grown later
    return True


def release(mountpoint: Path) -> None:
    """Unmount (lazily: a container that still holds it lets go when it exits); the image is kept."""
    if os.path.ismount(mountpoint):
        _run("umount", "-l", str(mountpoint))


def remove(image: Path, mountpoint: Path) -> None:
    release(mountpoint)
    image.unlink(missing_ok=True)
