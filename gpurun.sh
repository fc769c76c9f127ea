#!/bin/sh
export LD_LIBRARY_PATH=$PWD/.devlibs
export SPARKINFER_CACHE_DIR=$PWD/build/gpu-cache SK_GPU_TEST_CACHE=$PWD/build/gpu-cache
chmod 700 build/gpu-cache
R=$OUT/r; mkdir -p $R
T0=$(date +%s)
sh tests/run-suites.sh build/tests/gpu/test_gemm_gpu build/tests/gpu/test_runtime_gpu build/tests/gpu/test_quant_gpu build/tests/gpu/test_mhc_gpu > $R/tests.log 2>&1
echo "tests $(( $(date +%s) - T0 )) s" >> $R/time.txt
SK_BENCH_DECODE_ONLY=1 SK_BENCH_M=1,4,16 build/bench/bench_gemm > $R/gemm.log 2>&1
echo "gemm $(( $(date +%s) - T0 )) s" >> $R/time.txt
cd $OUT && tar czf r.tgz r
