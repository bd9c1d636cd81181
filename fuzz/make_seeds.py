#!/usr/bin/env python3
"""Writes the committed seed corpus: a few fixed pseudo-random inputs of several lengths.

fuzz_aclnn decodes any bytes into a call (FuzzedDataProvider), so plain random bytes of
assorted lengths already reach both modes, every dtype and valid and invalid shapes; the fuzzer
grows the rest. Seeds starting with 'P' drive MoeTokenPermute. Fixed seeds keep the files reproducible.
"""
import os
import random

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

def main():
    os.makedirs(CORPUS, exist_ok=True)
    for seed, length in enumerate([16, 64, 128, 256, 512, 1024, 2048, 4096]):
        rng = random.Random(seed)
        data = bytes(rng.randrange(256) for _ in range(length))
        with open(os.path.join(CORPUS, "seed_%02d_%d.bin" % (seed, length)), "wb") as f:
            f.write(data)
        # The same bytes behind 'P' drive MoeTokenPermute.
        with open(os.path.join(CORPUS, "permute_seed_%02d_%d.bin" % (seed, length)), "wb") as f:
            f.write(b"P" + data)

if __name__ == "__main__":
    main()
