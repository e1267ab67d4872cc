# The demo (`make demo`) and example programs. Included by the Makefile.

DEMO := $(O)/examples/vgpu_demo

$(DEMO): $(O)/obj/examples/vgpu_demo.o
	@mkdir -p $(@D)
	$(CC) -o $@ $^ $(LDFLAGS_ALL) -L$(CUDA_HOME)/lib64/stubs -lcuda

demo:
	@$(MAKE) --no-print-directory deps
	@$(MAKE) --no-print-directory all $(DEMO) $(O)/tests/kernels/basic.emu.so $(O)/tests/kernels/basic.fatbin
	@examples/demo.sh $(O)
