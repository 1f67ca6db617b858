#!/usr/bin/env bash
T=240 bash .scratch/s11/ab.sh 1 graphs2 scripts/bench_graphs.py --rounds 3
W=4 T=420 bash .scratch/s11/d1.sh layer
