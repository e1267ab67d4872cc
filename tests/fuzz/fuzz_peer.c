/* libFuzzer: what another node's vgpud (or anything that reaches --remote-listen) sends before and
 * after the handshake (remote/handshake.c, remote/link_msg.c).
 * Input: [u8 what: 0 to a listener, 1 to a dialer that sent HELLO, 2 link messages] then records
 * [u16 length][bytes], each one message. */
#include <stdint.h>
#include <string.h>

#include "handshake.h"
#include "link_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char key[] = "fuzzing key";
    unsigned what = data[0] % 3;
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
        if (what == 2) {
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
