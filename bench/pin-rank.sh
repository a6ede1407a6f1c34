#!/bin/sh
# Runs a rank pinned to CPU (rank mod CPUs), whichever launcher started it: on testbed
# hosts (network namespaces of one machine) every host sees all CPUs, so a launcher's own
# per-host binding would put rank 0 of each host on CPU 0.
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PONTOON_RANK:-0}}}
exec taskset -c "$((rank % $(nproc --all)))" "$@"
