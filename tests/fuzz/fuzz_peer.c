/* libFuzzer: what another node's vgpud (or anything that reaches --remote-listen) sends before and
 * after the handshake (remote/handshake.c, remote/link_msg.c), its remote sessions' messages and the
 * records in them, as the serving worker's feed and the tenant's relay read them
 * (remote/session_msg.c, common/record_io.c), and what other nodes write in etcd
 * (remote/etcd_entry.c, after base64).
 * Input: [u8 what: 0 to a listener, 1 to a dialer that sent HELLO, 2 link messages, 3 etcd entries
 * (base64 text), 4 session messages] then records [u16 length][bytes], each one message. */
#include <stdint.h>
#include <string.h>

#include "base64.h"
#include "etcd.h"
#include "handshake.h"
#include "link_msg.h"
#include "record_io.h"
#include "session_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char key[] = "fuzzing key";
    unsigned what = data[0] % 5;
    struct vgpu_channel_layout layout;
    vgpu_channel_layout_make(&layout, 1u << 16, 1u << 16, 8u << 20, 4, 1u << 20);
    struct hs h;
    struct hs_msg out;
    if (what == 0)
        hs_listen(&h, key, sizeof key - 1, "listener");
    else if (what == 1)
        hs_dial(&h, key, sizeof key - 1, "dialer", &out);
    size_t at = 1;
    while (at + 2 <= size) {
        size_t len = (size_t)data[at] | (size_t)data[at + 1] << 8;
        at += 2;
        if (len > size - at)
            len = size - at;
        if (what == 4) {
            struct session_hdr sh;
            const uint8_t *tail;
            struct record_io io;
            if (session_msg_decode(data + at, len, &sh, &tail) == 0) {
                if (sh.len != len - sizeof sh || sh.kind >= SESS_KINDS)
                    __builtin_trap();
                if (sh.kind == SESS_RECORD && record_io_of(tail, sh.len, &layout, &io) == 0 &&
                    ((io.in_size && !vgpu_data_range_ok(&layout, io.in_off, io.in_size)) ||
                     (io.out_size && !vgpu_data_range_ok(&layout, io.out_off, io.out_size)) ||
                     (io.slot != VGPU_NO_SLOT && io.slot >= layout.slot_count)))
                    __builtin_trap(); /* a range the feed would copy outside the data area */
            }
        } else if (what == 3) {
            static char text[65536];
            static uint8_t decoded[65536];
            memcpy(text, data + at, len < sizeof text - 1 ? len : sizeof text - 1);
            text[len < sizeof text - 1 ? len : sizeof text - 1] = '\0';
            long n = base64_decode(text, decoded, sizeof decoded - 1);
            struct etcd_node node;
            if (n >= 0) {
                decoded[n] = '\0';
                if (etcd_node_parse((const char *)decoded, &node) == 0 && node.ngpus > REMOTE_MAX_GPUS)
                    __builtin_trap();
            }
        } else if (what == 2) {
            struct link_msg m;
            if (link_msg_decode(data + at, len, &m) == 0 && m.ngpus > REMOTE_MAX_GPUS)
                __builtin_trap(); /* accepted what it must not */
        } else {
            int rc = hs_receive(&h, data + at, len, &out);
            if (rc == 0 && what == 1)
                __builtin_trap(); /* a dialer is never done without sending its proof */
            if (h.state == HS_DONE && !mac_equal(out.mac, out.mac, sizeof out.mac))
                __builtin_trap();
        }
        at += len;
    }
    return 0;
}
