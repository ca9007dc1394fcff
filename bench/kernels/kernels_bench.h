// The kernel benchmarks behind `ringtrain bench kernels`.
#pragma once

namespace rt {

// Runs the kernel benchmarks and prints one JSON object per line on stdout: first the OpenBLAS
// setup, then GFLOP/s of the GEMM shapes of configs S and M (forward, backward-input,
// backward-weight and the whole MatmulBackward) for our path next to raw OpenBLAS sgemm on the
// same shapes with the ratio; GB/s of LayerNorm, GELU and AdamW next to memcpy bandwidth
// measured in the same run, with the ratio; attention forward+backward time. Every figure is
// the median of --reps repetitions, the compared functions sampled in turn; the best sample
// and the median of the per-repetition ratios (ratio_paired) come with it.
// Arguments (argv[0] is the program name): --config=S|M|all (default all), --reps=N (default
// 31), --threads=N (OpenBLAS threads; default OpenBLAS's own choice), --help. Returns 0 on
// success, 2 on bad arguments or --help (with a message on stderr), 1 if an op failed. Not
// thread-safe; uses the CPU backend.
int RunKernelsBench(int argc, char** argv);

}  // namespace rt
