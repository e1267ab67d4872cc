# Tests: Check unit tests (tests/unit), host-mode integration on the emu executor (tests/host),
# the same programs on a GPU (tests/gpu). Included by the top-level Makefile.

TEST_O := $(O)/tests

# ---- CUDA images built by nvcc during the test build: every tests/kernels/NAME.cu as a fatbin with
# nvcc's default compression, uncompressed, zstd (-compress-mode=size) and LZ4 (-compress-mode=speed).
NVCC_GENCODE := -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) -gencode arch=compute_$(GPU_ARCH),code=compute_$(GPU_ARCH)
KERNEL_CU := $(sort $(wildcard tests/kernels/*.cu))
KERNEL_NAMES := $(KERNEL_CU:tests/kernels/%.cu=%)
FATBINS := $(foreach k,$(KERNEL_NAMES),$(TEST_O)/kernels/$(k).fatbin $(TEST_O)/kernels/$(k).none.fatbin \
	$(TEST_O)/kernels/$(k).zstd.fatbin $(TEST_O)/kernels/$(k).lz4.fatbin)

$(TEST_O)/kernels/%.fatbin: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin $(NVCC_GENCODE) $< -o $@
# PTX and relocatable cubins, for the JIT linking test.
PTXS := $(foreach k,$(KERNEL_NAMES),$(TEST_O)/kernels/$(k).ptx $(TEST_O)/kernels/$(k).rdc.cubin)
$(TEST_O)/kernels/%.rdc.cubin: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -cubin -rdc=true -arch=sm_$(GPU_ARCH) $< -o $@
$(TEST_O)/kernels/%.ptx: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -ptx -arch=compute_$(GPU_ARCH) $< -o $@
$(TEST_O)/kernels/%.none.fatbin: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin $(NVCC_GENCODE) -compress-mode=none $< -o $@
$(TEST_O)/kernels/%.zstd.fatbin: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin $(NVCC_GENCODE) -compress-mode=size $< -o $@
$(TEST_O)/kernels/%.lz4.fatbin: tests/kernels/%.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin $(NVCC_GENCODE) -compress-mode=speed $< -o $@

# ---- emu kernels: tests/kernels/NAME.emu.c -> NAME.emu.so, host functions vgpud's emu executor runs.
# Built without sanitizers: they are module images, loaded into whichever vgpud runs them.
EMU_KERNEL_SRC := $(sort $(wildcard tests/kernels/*.emu.c))
EMU_KERNELS := $(EMU_KERNEL_SRC:tests/kernels/%.c=$(TEST_O)/kernels/%.so)
$(TEST_O)/kernels/%.emu.so: tests/kernels/%.emu.c include/vgpu/emu_kernel.h
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fPIC -shared -Iinclude $< -o $@

include tests/apps/apps.mk
include tests/fuzz/fuzz.mk

# ---- unit tests
UNIT_SRC := $(sort $(wildcard tests/unit/check_*.c))
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(TEST_O)/unit/%)
$(TEST_O)/unit/%: $(O)/obj/tests/unit/%.o $(LIBSCHED) $(LIBASSEMBLY) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CHECK_LIBS) $(PKG_LIBS) -ldl -lm

$(O)/obj/tests/%.o: tests/%.c | $(GEN)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(CHECK_CFLAGS) $(EXTRA_CFLAGS) $(DEPFLAGS) -c $< -o $@

# Tests of a worker's parts and of vgpud's see their headers.
$(O)/obj/tests/unit/check_gate.o $(O)/obj/tests/unit/check_objects.o: EXTRA_CFLAGS := -Iworker -Iworker/exec -Ibackend

$(TEST_O)/unit/check_objects: $(O)/obj/tests/unit/check_objects.o $(O)/obj/worker/objects.o $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CHECK_LIBS)

# The emu executor's device memory.
$(O)/obj/tests/unit/check_emu_memory.o: EXTRA_CFLAGS := -Iworker -Iworker/exec
$(TEST_O)/unit/check_emu_memory: $(O)/obj/tests/unit/check_emu_memory.o $(LIBWORKER) $(LIBSHM) $(LIBSCHED) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CHECK_LIBS) $(PKG_LIBS) -ldl -lm

# The frontend's copy pool.
$(O)/obj/tests/unit/check_bulkcopy.o: EXTRA_CFLAGS := -Ifrontend -D__CUDA_API_VERSION_INTERNAL
$(TEST_O)/unit/check_bulkcopy: $(O)/obj/tests/unit/check_bulkcopy.o $(O)/obj/frontend/bulkcopy.o $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CHECK_LIBS)

# vgpud's memory manager.
$(O)/obj/tests/unit/check_shm.o: EXTRA_CFLAGS := -Ishm
$(TEST_O)/unit/check_shm: $(O)/obj/tests/unit/check_shm.o $(LIBSHM) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CHECK_LIBS)

# The links between vgpuds (remote/), where vgpud puts their bulk bytes, and the served rings it posts to.
$(O)/obj/tests/unit/check_remote.o: EXTRA_CFLAGS := -Iremote -Ibackend
$(TEST_O)/unit/check_remote: $(O)/obj/tests/unit/check_remote.o $(O)/obj/backend/remote_bulk.o \
		$(O)/obj/backend/served_ring.o $(LIBREMOTE) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CHECK_LIBS) $(REMOTE_LIBS)

# ---- integration programs: ordinary driver-API programs linked against the toolkit's stub
# libcuda.so (NEEDED libcuda.so.1), as an unmodified application would be; vgpu-run points them at ours.
PROG_SRC := $(sort $(wildcard tests/host/prog_*.c))
PROG_BIN := $(PROG_SRC:tests/host/%.c=$(TEST_O)/host/%)
$(TEST_O)/host/prog_%: $(O)/obj/tests/host/prog_%.o $(O)/obj/tests/host/progutil.o
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) -L$(CUDA_HOME)/lib64/stubs -lcuda -lm -ldl

# The NVML program loads NVML at run time, declared by the project's NVML header.
$(O)/obj/tests/host/prog_nvml.o: EXTRA_CFLAGS := -Invml

# The hostile client speaks the wire protocol itself.
$(TEST_O)/host/hostile: $(O)/obj/tests/host/hostile.o $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL)

# A peer that is not one speaks UCX to a vgpud's --remote-listen.
$(O)/obj/tests/host/hostile_peer.o: EXTRA_CFLAGS := -Iremote
$(TEST_O)/host/hostile_peer: $(O)/obj/tests/host/hostile_peer.o $(LIBREMOTE) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(REMOTE_LIBS)

$(TEST_O)/host/check_host: $(O)/obj/tests/host/check_host.o $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CHECK_LIBS)

$(TEST_O)/host/check_cluster: $(O)/obj/tests/host/check_cluster.o $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CHECK_LIBS)

HOST_TEST_DEPS := all $(PROG_BIN) $(APPS_BIN) $(TEST_O)/host/hostile $(TEST_O)/host/check_host $(EMU_KERNELS) $(FATBINS) $(PTXS) \
	$(TEST_O)/host/hostile_peer $(TEST_O)/host/check_cluster

TEST_TMP = $(TEST_O)/tmp
TEST_ENV = CUDA_HOME=$(CUDA_HOME) VGPU_TEST_BIN=$(abspath $(O)/bin) VGPU_TEST_PROGS=$(abspath $(TEST_O)/host) \
	VGPU_TEST_KERNELS=$(abspath $(TEST_O)/kernels) VGPU_TEST_TMP=$(abspath $(TEST_TMP)) \
	VGPU_TEST_APPS=$(abspath $(APPS_O)) VGPU_TEST_APP_NAMES="$(APPS_NAMES)" \
	VGPU_TEST_APPS_EXPECTED=$(abspath tests/apps/expected) VGPU_TEST_APPS_PRELOAD=$(APPS_PRELOAD)
# The suite's programs carry no sanitizer; a sanitized frontend inside them needs ASan loaded first.
APPS_PRELOAD := $(if $(filter 1,$(SAN)),$(shell $(CC) -print-file-name=libasan.so))

check-unit: check-unit-build
	@mkdir -p $(TEST_TMP)
	@set -e; for t in $(UNIT_BIN); do echo "== $$t"; $(TEST_ENV) CK_DEFAULT_TIMEOUT=60 $$t; done

# The two host suites, each a target of its own with a scratch folder of its own, so that
# `make -jN check-host` runs them side by side (make check does): they share no socket, port or
# file (check_cluster's vgpuds listen on ports of its own process id, in namespaces of its own).
HOST_SUITES := check_host check_cluster
check-host: $(HOST_SUITES:%=check-host-%)
$(foreach t,$(HOST_SUITES),$(eval check-host-$(t): TEST_TMP = $(TEST_O)/tmp/$(t)))
$(HOST_SUITES:%=check-host-%): check-host-%: check-host-build
	@mkdir -p $(TEST_TMP)
	$(TEST_ENV) CK_DEFAULT_TIMEOUT=120 $(TEST_O)/host/$*

# `make check`: install what is missing, build everything plainly (the -Werror build users get),
# run the whole suite built with ASan and UBSan, a bounded run of each fuzzer, then the Xen smoke
# test on the plain build.
# The builds use every processor (CHECK_JOBS), and so do the fuzzers' bounded runs (each one
# thread) and the two host suites (check_host and check_cluster side by side, their outputs each in
# one piece); the unit tests run one after another.
CHECK_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
check:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory -j$(CHECK_JOBS) all
	@$(MAKE) --no-print-directory -j$(CHECK_JOBS) SAN=1 check-unit-build check-host-build
	@$(MAKE) --no-print-directory SAN=1 check-unit
	@$(MAKE) --no-print-directory -j$(CHECK_JOBS) -Otarget SAN=1 check-host
	@$(MAKE) --no-print-directory -j$(CHECK_JOBS) check-fuzz-build
	@$(MAKE) --no-print-directory -j$(CHECK_JOBS) -Otarget check-fuzz
	@$(MAKE) --no-print-directory -j$(CHECK_JOBS) check-xen-build
	@$(MAKE) --no-print-directory check-xen XEN_SAN_BUILD=build/san

# What each part of the suite needs built (make check builds them in parallel first).
check-unit-build: $(UNIT_BIN) $(FATBINS) $(EMU_KERNELS)
check-host-build: $(HOST_TEST_DEPS)
.PHONY: check-unit-build check-host-build check-xen-build $(HOST_SUITES:%=check-host-%)

# ---- on a machine with an NVIDIA GPU: the integration programs with real CUDA images, each run
# natively and through a vGPU, outputs compared.
GPU_PROGS := $(PROG_BIN)
check-gpu: all $(PROG_BIN) $(FATBINS) $(PTXS) $(APPS_BIN)
	VGPU_BIN=$(abspath $(O)/bin) VGPU_PROGS=$(abspath $(TEST_O)/host) VGPU_KERNELS=$(abspath $(TEST_O)/kernels) \
		VGPU_APPS=$(abspath $(APPS_O)) VGPU_APP_NAMES="$(APPS_NAMES) $(APPS_LIB_NAMES) $(APPS_GPU_NAMES)" \
		VGPU_APPS_EXPECTED=$(abspath tests/apps/expected) tests/gpu/run.sh

# The gate (a worker's side) and the scheduler host (vgpud's) together, with a stand-in executor.
$(TEST_O)/unit/check_gate: $(O)/obj/tests/unit/check_gate.o $(O)/obj/worker/gate.o $(O)/obj/backend/sched_host.o \
		$(LIBSCHED) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) $(CHECK_LIBS) -lm

# ---- Xen: a real Xen 4.17 under QEMU (software emulation), vgpud in dom0 serving a guest
# (tests/xen). Built from the plain build: the guest's programs run under emulation, slowly enough.
XEN_HOSTILE := $(TEST_O)/xen/xen_hostile
$(XEN_HOSTILE): $(O)/obj/tests/xen/xen_hostile.o $(LIBXEN) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) -ldl

# XEN_SAN_BUILD: a sanitizer build for dom0's vgpud and some of the guest's programs (make check).
XEN_SAN_BUILD ?=
check-xen-build: all $(PROG_BIN) $(EMU_KERNELS) $(XEN_HOSTILE) $(O)/benchmarks/bench_latency
check-xen: check-xen-build
	VGPU_BUILD=$(abspath $(O)) VGPU_SAN_BUILD=$(if $(XEN_SAN_BUILD),$(abspath $(XEN_SAN_BUILD))) XEN_OUT=$(abspath $(O))/xen XEN_CACHE=$(abspath $(O))/xen-cache tests/xen/build.sh
	$(PYTHON) tests/xen/run.py --out $(O)/xen --log $(O)/xen/serial.log --timeout 480
