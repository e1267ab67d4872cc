# Benchmarks: native vs vGPU side by side in one run (benchmarks/run.sh). Included by the Makefile.

BENCH_SRC := $(sort $(wildcard benchmarks/bench_*.c))
# NCCL ships beside the toolkit, not in it: its benchmark where its header is there.
ifeq ($(wildcard $(CUDA_HOME)/include/nccl.h),)
BENCH_SRC := $(filter-out benchmarks/bench_nccl.c,$(BENCH_SRC))
endif
BENCH_BIN := $(BENCH_SRC:benchmarks/%.c=$(O)/benchmarks/%)
BENCH_LIBS_bench_nccl := -L$(CUDA_HOME)/lib64 -lnccl

$(O)/benchmarks/%: $(O)/obj/benchmarks/%.o
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) -L$(CUDA_HOME)/lib64/stubs -lcuda $(BENCH_LIBS_$*)

$(O)/obj/benchmarks/%.o: benchmarks/%.c benchmarks/bench.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(DEPFLAGS) -c $< -o $@

# The raw link (UCX between two processes, as vgpud's links use it) that the remote vGPUs' figures
# are read against (benchmarks/remote.sh).
LINK_RAW := $(O)/benchmarks/link_raw
$(LINK_RAW): benchmarks/link_raw.c benchmarks/bench.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(shell pkg-config --cflags ucx) -o $@ $< $(LDFLAGS_ALL) $(shell pkg-config --libs ucx)

# Remote vGPUs against native, local vGPUs and the raw link, by transport (benchmarks/remote.sh).
bench-remote: all $(BENCH_BIN) $(LINK_RAW) $(O)/tests/kernels/basic.fatbin
	VGPU_BIN=$(O)/bin BENCH_BIN=$(O)/benchmarks BENCH_MODULE=$(O)/tests/kernels/basic.fatbin \
		BENCH_OUT=$(O)/benchmarks/results benchmarks/remote.sh

# Remote copies under several vgpud configurations (pieces, pulls, UCX's rendezvous), alternating
# rounds beside the raw link's cold copies (benchmarks/remote_sweep.sh).
bench-remote-sweep: all $(BENCH_BIN) $(LINK_RAW)
	VGPU_BIN=$(O)/bin BENCH_BIN=$(O)/benchmarks BENCH_OUT=$(O)/benchmarks/results benchmarks/remote_sweep.sh

# Where a remote vGPU's time goes, point by point through every process (benchmarks/timeline.sh).
bench-timeline: all $(BENCH_BIN)
	VGPU_BIN=$(O)/bin BENCH_BIN=$(O)/benchmarks TIMELINE_OUT=$(O)/benchmarks/results/timeline benchmarks/timeline.sh

# The frontend's copy pool alone, as a tenant's copies out of staging memory use it.
COPY_POOL := $(O)/benchmarks/copy_pool
$(COPY_POOL): benchmarks/copy_pool.c frontend/bulkcopy.c frontend/fe.h $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -D__CUDA_API_VERSION_INTERNAL -Ifrontend -o $@ benchmarks/copy_pool.c frontend/bulkcopy.c \
		$(LIBCOMMON) $(LDFLAGS_ALL)

# The spin kernel of the GPU-sharing benchmark.
$(O)/benchmarks/spin.fatbin: benchmarks/kernels/spin.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) $< -o $@

# A library-sized image for bench_library: many kernels, for this GPU's generation and two others.
$(O)/benchmarks/library.fatbin: benchmarks/kernels/library.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) \
		-gencode arch=compute_100,code=sm_100 $< -o $@

# How vGPUs share one GPU under each scheduling policy (benchmarks/share.sh); needs an NVIDIA GPU.
bench-share: all $(BENCH_BIN) $(O)/benchmarks/spin.fatbin
	VGPU_BIN=$(O)/bin BENCH_BIN=$(O)/benchmarks BENCH_SPIN=$(O)/benchmarks/spin.fatbin \
		BENCH_MODULE=$(O)/tests/kernels/basic.fatbin BENCH_OUT=$(O)/benchmarks/share benchmarks/share.sh

bench-gpu: all $(BENCH_BIN) $(LINK_RAW) $(O)/tests/kernels/basic.fatbin $(O)/benchmarks/spin.fatbin \
		$(O)/benchmarks/library.fatbin $(APPS_BIN)
	VGPU_BIN=$(O)/bin BENCH_BIN=$(O)/benchmarks BENCH_MODULE=$(O)/tests/kernels/basic.fatbin \
		BENCH_SPIN=$(O)/benchmarks/spin.fatbin BENCH_LIBRARY=$(O)/benchmarks/library.fatbin \
		BENCH_APPS=$(APPS_O) BENCH_APP_NAMES="$(APPS_NAMES)" BENCH_OUT=$(O)/benchmarks/results benchmarks/run.sh
