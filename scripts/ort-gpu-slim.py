"""Writes a copy of ONNX Runtime's CUDA execution provider that keeps the GPU code of one
architecture only, for a GPU machine that has no network and takes files in small loads (the
library that `scripts/setup-onnxruntime.sh --gpu` installs is 284 MB, 185 MB compressed; its sm_90
code alone compresses to 52 MB).

The provider's `.nv_fatbin` section holds fat binaries, each a container of compiled kernels for
several architectures (sm_75, 80, 86, 89, 90 and 120 in 1.31.1). In every container that has code
for the architecture asked for, the other entries are dropped and the container's size is
rewritten, as if it had been compiled for that architecture alone; containers without it are left
as they are. Nothing else in the library changes, so it loads as before and runs on GPUs of that
architecture (the driver picks the matching entry either way).

Usage: python3 scripts/ort-gpu-slim.py SM SOURCE DEST     e.g. 90 for the H100 and H200
"""
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50


def sections(elf):
    """(name, file offset, size) of every section of a 64-bit little-endian ELF file."""
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for name, _type, _flags, _addr, offset, size in headers:
        end = elf.index(b"\0", names + name)
        yield bytes(elf[names + name:end]).decode(), offset, size


def slim(elf, sm):
    """Drops the other architectures' entries in place; returns (entries kept, dropped, containers
    left whole)."""
    fatbin = [(o, s) for name, o, s in sections(elf) if name == ".nv_fatbin"]
    if not fatbin:
        raise SystemExit("no .nv_fatbin section: not a CUDA library")
    start, size = fatbin[0]
    pos, end = start, start + size
    kept = dropped = whole = 0
    while pos < end:
        magic, _version, header, payload = struct.unpack_from("<IHHQ", elf, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned, with padding between them
            continue
        entry, last = pos + header, pos + header + payload
        chosen = bytearray()
        count = matched = 0
        while entry < last:
            _kind, _v, entry_header, padded = struct.unpack_from("<HHII", elf, entry)
            arch = struct.unpack_from("<I", elf, entry + 28)[0]
            count += 1
            if arch == sm:
                chosen += elf[entry:entry + entry_header + padded]
                matched += 1
            entry += entry_header + padded
        if chosen:
            body = pos + header
            elf[body:body + len(chosen)] = chosen
            elf[body + len(chosen):last] = bytes(last - body - len(chosen))
            struct.pack_into("<Q", elf, pos + 8, len(chosen))
            kept += 1
            dropped += count - matched
        else:
            whole += 1
        pos = last
    return kept, dropped, whole


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    sm, source, dest = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    elf = bytearray(open(source, "rb").read())
    kept, dropped, whole = slim(elf, sm)
    if kept == 0:
        raise SystemExit(f"no code for sm_{sm} in {source}")
    with open(dest, "wb") as out:
        out.write(elf)
    print(f"sm_{sm}: {kept} containers keep their sm_{sm} entry ({dropped} other entries dropped); "
          f"{whole} without sm_{sm} left whole", file=sys.stderr)


if __name__ == "__main__":
    main()
