#!/usr/bin/env bash
G=benchmarks/2026-11-24-h100x1-a/scripts/graph_nodes.py
bash .scratch/s11/ab.sh 2 nodes2048 $G --launches 20 --skip 2 --no-refs --shape 2048,4096,4096
bash .scratch/s11/ab.sh 2 nodes8192 $G --launches 20 --skip 2 --no-refs --shape 8192,8192,14336
bash .scratch/s11/ab.sh 2 host .scratch/s11/host_pieces.py 2048,4096,4096 8192,8192,14336 992,2048,2816 128,4096,2048
