#!/usr/bin/env python3
"""Rewrites the function prototypes of include/mpi.h from a reference standard-ABI
header (PyPI mpich's mpi_abi.h): every function of the standard, MPI_* and PMPI_*.

The header declares them all, as the standard ABI intends: a tool built against it
(mpi4py) refers to each weakly and finds at run time which ones libmpi_abi.so.1
exports. A program calling one pontoon does not implement fails to link, naming it.
The library's exports must be a subset (checked here and by crates/cli/tests/c_abi.rs).

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
exported = {w for w in nm.stdout.split() if w.startswith("MPI_") or w.startswith("PMPI_")}
unknown = sorted(exported - set(protos))
if unknown:
    sys.exit(f"exported but not in the standard: {unknown}")
lines = []
for name, (ret, args) in sorted(protos.items(), key=lambda kv: (kv[0].startswith("P"), kv[0])):
    lines.append(f"{ret} {name}({args});")
lines.append("")
header = open("include/mpi.h").read()
start = header.index("\n", header.index("/* ---- functions")) + 1
end = header.index("/* ---- end of functions")
open("include/mpi.h", "w").write(header[:start] + "\n" + "\n".join(lines) + header[end:])
print(f"include/mpi.h: {len(protos)} prototypes; the library exports {len(exported)} of them")
