#!/usr/bin/env python3
"""Rewrites the function prototypes of include/mpi.h: one for every MPI_* and PMPI_*
function libmpi_abi.so exports, with the signature the standard gives it, taken from
a reference standard-ABI header (PyPI mpich's mpi_abi.h).

    scripts/update-mpi-h.py REFERENCE_MPI_ABI_H LIBMPI_ABI_SO
"""
import re
import subprocess
import sys

ref_path, lib = sys.argv[1], sys.argv[2]
ref = open(ref_path).read()
protos = {}
for line in ref.splitlines():
    m = re.match(r"^(\w[\w ]*?)\s+(P?MPI_\w+)\((.*)\);", line)
    if m:
        protos[m.group(2)] = (m.group(1), m.group(3))
nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True)
exported = sorted({w for w in nm.stdout.split() if w.startswith("MPI_")})
lines = []
for prefix in ["", "P"]:
    for name in exported:
        key = prefix + name
        if key not in protos:
            sys.exit(f"{key} is exported but the reference header has no prototype for it")
        ret, args = protos[key]
        lines.append(f"{ret} {key}({args});")
    lines.append("")
header = open("include/mpi.h").read()
start = header.index("\n", header.index("/* ---- functions")) + 1
end = header.index("/* ---- end of functions")
open("include/mpi.h", "w").write(header[:start] + "\n" + "\n".join(lines) + header[end:])
print(f"include/mpi.h: {len(exported)} functions")
