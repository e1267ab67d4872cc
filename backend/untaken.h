/* How much of its remote sessions' traffic vgpud keeps for a worker that does not take it (in its
 * mailbox's queue, workers.c; behind a served channel's full ring, served_ring.c): a worker that
 * takes none of it for UNTAKEN_STUCK_NS (one busy with a long kernel still takes some, as its
 * channels drain), or for which more than UNTAKEN_MAX bytes wait, is given up on rather than let
 * vgpud's memory grow. */
#ifndef VGPU_BACKEND_UNTAKEN_H
#define VGPU_BACKEND_UNTAKEN_H

#define UNTAKEN_STUCK_NS (30ll * 1000000000ll)
#define UNTAKEN_MAX (1ull << 30)

#endif
