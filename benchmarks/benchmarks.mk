# Benchmarks: native vs vGPU side by side (filled in below).
