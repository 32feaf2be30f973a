"""Swap a directory for a symlink and back, in a process of its own, until told to stop.

Run as ``python _dir_flipper.py DIR TARGET COUNTER``. DIR (a real directory) is renamed aside and
a symlink to TARGET put in its place, then the symlink is removed and the directory renamed
back, over and over. Each state is held for a pseudo-random while of up to 2 ms (fixed seed),
so races on both short and long gaps between a check and a use are met. COUNTER is a 16-byte
file both sides map: after every flip the flipper stores how many it has done (little-endian
int64 at offset 0), and it stops, with DIR a real directory again, once the other side stores a
nonzero int64 at offset 8.
"""

from __future__ import annotations

import mmap
import os
import random
import struct
import sys
import time


def main(path: str, target: str, counter: str) -> None:
    aside, link = path + ".aside", path + ".link"
    with open(counter, "r+b") as fh:
        shared = mmap.mmap(fh.fileno(), 16)
    dwell = random.Random(20261203).uniform
    flips = 0
    try:
        while not struct.unpack_from("<q", shared, 8)[0]:
            os.symlink(target, link)
            os.rename(path, aside)
            os.replace(link, path)  # the name now leads outside
            flips += 1
            struct.pack_into("<q", shared, 0, flips)
            time.sleep(dwell(0, 0.002))
            os.unlink(path)
            os.rename(aside, path)  # and is the real directory again
            flips += 1
            struct.pack_into("<q", shared, 0, flips)
            time.sleep(dwell(0, 0.002))
    finally:
        shared.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
