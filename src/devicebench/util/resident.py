"""The file pages a fork does not count as its own, mapped again so a forked run's memory reads as a fresh
process's.

A fork shares its parent's pages. The private ones it inherits stay mapped and count in its resident
set; file-backed ones (the code and read-only data of torch, MLflow and their libraries: hundreds of MB
in a plan's warm server) are left out of the child's page tables and come back one fault
at a time, only as the child touches them. A tiny cifar run forked from the warm server logged
`memory/peak_rss_bytes` 616 MiB where the same run in a fresh process, which touched those pages while
importing, logged 945 MiB; a report shows that figure and a CPU side is priced for it. So the server
lists the file pages it has resident once, after preloading (`resident_file_pages`: each page's present
bit in /proc/self/pagemap), and each child maps them again first (`map_again`: madvise
MADV_POPULATE_READ, one call per range, milliseconds in all), starting with the resident set a fresh process has
after the same imports. Linux 5.14 or newer; elsewhere nothing is listed and nothing changes.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
from array import array
from collections.abc import Callable
from typing import BinaryIO

_MADV_POPULATE_READ = 22  # linux/mman.h, since 5.14: fault pages in for reading, as a read would
_PRESENT = 1 << 63  # /proc/PID/pagemap: the page is in memory (readable without privileges)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

Ranges = list[tuple[int, int]]  # (address, length in bytes)


def _madvise() -> Callable[..., int] | None:
    """libc's madvise, looked up once in the server: a forked child must not dlopen."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return fn


_MADVISE = _madvise()


def resident_file_pages() -> Ranges:
    """Every run of resident pages in this process's readable file mappings (not /dev: a device's
    memory is not a file's pages); [] where /proc cannot say."""
    if _MADVISE is None:
        return []
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
            return [r for line in maps for r in _resident(line, pagemap)]
    except OSError:
        return []


def _resident(line: str, pagemap: BinaryIO) -> Ranges:
    """The runs of resident pages of one /proc/self/maps line, if it maps a readable file."""
    parts = line.split(maxsplit=5)
    path = parts[5].strip() if len(parts) == 6 else ""
    if not path.startswith("/") or path.startswith("/dev/") or "r" not in parts[1]:
        return []
    low, high = (int(x, 16) for x in parts[0].split("-"))
    pagemap.seek(low // _PAGE * 8)
    entries = array("Q")
    entries.frombytes(pagemap.read((high - low) // _PAGE * 8))
    runs: Ranges = []
    start = None
    for i, entry in enumerate(itertools.chain(entries, (0,))):  # the 0 closes a run at the mapping's end
        if entry & _PRESENT and start is None:
            start = i
        elif not entry & _PRESENT and start is not None:
            runs.append((low + start * _PAGE, (i - start) * _PAGE))
            start = None
    return runs


def map_again(ranges: Ranges) -> None:
    """In a forked child, before anything else: the server's resident file pages mapped into this
    process too. A kernel without MADV_POPULATE_READ refuses the first range and the rest are skipped:
    the child then counts only what it touches, as before."""
    if _MADVISE is None:
        return
    for address, length in ranges:
        if _MADVISE(address, length, _MADV_POPULATE_READ) != 0 and ctypes.get_errno() == errno.EINVAL:
            return
