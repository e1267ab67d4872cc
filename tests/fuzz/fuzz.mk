# Fuzzers (libFuzzer, clang): everything a tenant or a peer sends that vgpud or a worker decodes.
#   make check-fuzz    each fuzzer for FUZZ_SECONDS (default 10) from the committed seed corpus
#                      (-jN: N at once)
#   make fuzz          each for FUZZ_LONG_SECONDS (default 3600), corpora kept under $(O)/fuzz/work
#   make fuzz-seeds    rewrite the seed corpora (tests/fuzz/corpus) from well-formed inputs
# They are built apart from the rest with clang's sanitizers (ASan, UBSan and the fuzzer's own
# coverage), from the project's own sources.

FUZZ_CC ?= clang
FUZZ_SECONDS ?= 10
FUZZ_LONG_SECONDS ?= 3600
FUZZERS := records images control vchan peer
# The longest input of each: records a few dozen records (each input sets a channel up afresh),
# images whole fatbins, the others 8 KiB.
FUZZ_MAX_LEN_records := 2048
FUZZ_MAX_LEN_images := 65536
FUZZ_O := $(O)/fuzz
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -O1 -g $(WARN) -fno-omit-frame-pointer -pthread \
	-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined \
	-Iinclude -Icommon -Isched -Ixen -Iassembly -Iworker -Iworker/exec -Ishm -Ibackend -Iremote -I$(O)/gen \
	-isystem $(CUDA_HOME)/include $(PKG_CFLAGS)
# What the fuzzers drive: a worker's channel, handlers and emu executor; the parsers; vgpud's
# decoders of client messages; the vchan framing; what peers send (the handshake, link messages,
# remote sessions' messages).
FUZZ_SRC := $(COMMON_SRC) $(SHM_SRC) $(filter-out worker/main.c worker/images.c worker/xen_channel.c,$(WORKER_SRC)) \
	backend/client_msg.c xen/vchan_link.c remote/handshake.c remote/hmac_sha256.c remote/link_msg.c \
	remote/etcd_entry.c remote/session_msg.c backend/remote_bulk.c backend/served_ring.c
FUZZ_OBJ := $(FUZZ_SRC:%.c=$(FUZZ_O)/obj/%.o)
FUZZ_BIN := $(FUZZERS:%=$(FUZZ_O)/fuzz_%)

$(FUZZ_O)/obj/%.o: %.c | $(GEN)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) -MMD -MP -c $< -o $@

# Headers change the layout of what the objects share: they are rebuilt with them (the harnesses'
# objects too, which make would otherwise treat as intermediate, delete, and not look at again).
FUZZ_HARNESS_OBJ := $(FUZZERS:%=$(FUZZ_O)/obj/tests/fuzz/fuzz_%.o)
.SECONDARY: $(FUZZ_HARNESS_OBJ)
-include $(FUZZ_OBJ:.o=.d) $(FUZZ_HARNESS_OBJ:.o=.d)

$(FUZZ_O)/libfuzzed.a: $(FUZZ_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_O)/fuzz_%: $(FUZZ_O)/obj/tests/fuzz/fuzz_%.o $(FUZZ_O)/libfuzzed.a
	$(FUZZ_CC) -fsanitize=fuzzer,address,undefined -pthread -o $@ $^ $(PKG_LIBS) -ldl -lm

# Rebuilt when the headers it writes messages of change (their versions are in the seeds).
$(FUZZ_O)/seeds: tests/fuzz/seeds.c | $(GEN)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Iremote -MMD -MP -o $@ $<
-include $(FUZZ_O)/seeds.d

# A bounded run of each, from the committed seeds (new inputs go to a scratch corpus); each is a
# target of its own, so that `make -jN check-fuzz` runs N at once (make check does).
FUZZ_RUNS := $(FUZZERS:%=check-fuzz-%)
check-fuzz-build: $(FUZZ_BIN)
check-fuzz: $(FUZZ_RUNS)
$(FUZZ_RUNS): check-fuzz-%: $(FUZZ_O)/fuzz_%
	@rm -rf $(FUZZ_O)/scratch/$*; mkdir -p $(FUZZ_O)/scratch/$*; \
	rc=0; $(FUZZ_O)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -max_len=$(or $(FUZZ_MAX_LEN_$*),8192) -timeout=20 \
		-rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix=$(FUZZ_O)/crash-$*- $(FUZZ_O)/scratch/$* \
		tests/fuzz/corpus/$* >$(FUZZ_O)/fuzz_$*.log 2>&1 || rc=$$?; \
	echo "== fuzz_$* for $(FUZZ_SECONDS) s"; \
	grep -E "^(stat::number_of_executed_units|stat::new_units_added)" $(FUZZ_O)/fuzz_$*.log || true; \
	if [ $$rc -ne 0 ]; then tail -60 $(FUZZ_O)/fuzz_$*.log; exit 1; fi

# Long runs; what they find goes in FUZZING.md. The corpora grow under $(FUZZ_O)/work.
fuzz: $(FUZZ_BIN)
	@set -e; for f in $(FUZZERS); do \
		mkdir -p $(FUZZ_O)/work/$$f; \
		case $$f in records) len=$(FUZZ_MAX_LEN_records) ;; images) len=$(FUZZ_MAX_LEN_images) ;; *) len=8192 ;; esac; \
		$(FUZZ_O)/fuzz_$$f -max_total_time=$(FUZZ_LONG_SECONDS) -max_len=$$len -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
			-artifact_prefix=$(FUZZ_O)/crash-$$f- $(FUZZ_O)/work/$$f tests/fuzz/corpus/$$f 2>&1 | tail -12; \
	done

fuzz-seeds: $(FUZZ_O)/seeds $(TEST_O)/kernels/basic.zstd.fatbin $(TEST_O)/kernels/basic.lz4.fatbin \
		$(TEST_O)/kernels/basic.none.fatbin $(TEST_O)/kernels/params.zstd.fatbin
	$(FUZZ_O)/seeds tests/fuzz/corpus $(filter %.fatbin,$^)

.PHONY: check-fuzz check-fuzz-build $(FUZZ_RUNS) fuzz fuzz-seeds
