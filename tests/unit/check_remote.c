/* The links between vgpuds, without a network: HMAC-SHA256 against RFC 4231's vectors; the
 * handshake between two sides that hold the key, and every way a side that does not, or that
 * sends something else, is refused; the checks of link messages; peer and address parsing; remote
 * sessions' messages and batches, and what their records read and write in the data area; two
 * links' ends in one process over loopback, whose threads look on after traffic. */
#include <arpa/inet.h>
#include <check.h>
#include <ifaddrs.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base64.h"
#include "etcd.h"
#include "handshake.h"
#include "hmac_sha256.h"
#include "link.h"
#include "link_msg.h"
#include "record_io.h"
#include "remote_bulk.h"
#include "ring.h"
#include "served_ring.h"
#include "session_msg.h"
#include "vgpu/calls.h"
#include "../check_run.h"

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

START_TEST(hmac_rfc4231)
{
    char text[65];
    uint8_t mac[32], key[131];
    memset(key, 0x0b, 20);
    const void *d1[] = {"Hi There"};
    size_t l1[] = {8};
    hmac_sha256(key, 20, d1, l1, 1, mac);
    hex(mac, 32, text);
    ck_assert_str_eq(text, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    /* Parts hash as their concatenation. */
    const void *d2[] = {"what do ya want ", "for nothing?"};
    size_t l2[] = {16, 12};
    hmac_sha256("Jefe", 4, d2, l2, 2, mac);
    hex(mac, 32, text);
    ck_assert_str_eq(text, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* A key longer than a block is its hash. */
    memset(key, 0xaa, 131);
    const char *t = "Test Using Larger Than Block-Size Key - Hash Key First";
    const void *d3[] = {t};
    size_t l3[] = {strlen(t)};
    hmac_sha256(key, 131, d3, l3, 1, mac);
    hex(mac, 32, text);
    ck_assert_str_eq(text, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    uint8_t other[32];
    memcpy(other, mac, 32);
    ck_assert(mac_equal(mac, other, 32));
    other[31] ^= 1;
    ck_assert(!mac_equal(mac, other, 32));
}
END_TEST

static const char KEY[] = "the cluster's key", OTHER_KEY[] = "another key";

/* Run a handshake between a dialer with key dk and a listener with key lk; returns what the last
 * step returned on the side that ended it (0: both done). */
static int shake(const char *dk, const char *lk, struct hs *d, struct hs *l)
{
    struct hs_msg hello, challenge, proof;
    ck_assert_int_eq(hs_dial(d, dk, strlen(dk), "node-a", &hello), 0);
    ck_assert_int_eq(hs_listen(l, lk, strlen(lk), "node-b"), 0);
    ck_assert_int_eq(hs_receive(l, &hello, sizeof hello, &challenge), 1);
    int rc = hs_receive(d, &challenge, sizeof challenge, &proof);
    if (rc != 1)
        return rc;
    return hs_receive(l, &proof, sizeof proof, &challenge);
}

START_TEST(handshake_both_hold_the_key)
{
    struct hs d, l;
    ck_assert_int_eq(shake(KEY, KEY, &d, &l), 0);
    ck_assert_int_eq(d.state, HS_DONE);
    ck_assert_int_eq(l.state, HS_DONE);
    ck_assert_str_eq(d.peer, "node-b");
    ck_assert_str_eq(l.peer, "node-a");
    /* Nothing more is taken once it is over. */
    struct hs_msg m = {0}, out;
    ck_assert_int_eq(hs_receive(&l, &m, sizeof m, &out), -1);
}
END_TEST

START_TEST(handshake_wrong_key)
{
    /* The dialer sees that the listener does not hold its key, and sends no proof. */
    struct hs d, l;
    ck_assert_int_eq(shake(OTHER_KEY, KEY, &d, &l), -1);
    ck_assert_int_eq(d.state, HS_FAILED);
    ck_assert_str_eq(d.why, "the peer does not hold the cluster key");
    /* A dialer that answers the challenge with a proof it cannot make is refused by the listener. */
    struct hs_msg hello, challenge, proof;
    ck_assert_int_eq(hs_dial(&d, KEY, strlen(KEY), "node-a", &hello), 0);
    ck_assert_int_eq(hs_listen(&l, KEY, strlen(KEY), "node-b"), 0);
    ck_assert_int_eq(hs_receive(&l, &hello, sizeof hello, &challenge), 1);
    memset(&proof, 0, sizeof proof);
    proof = challenge; /* the listener's own MAC, replayed */
    proof.type = HS_PROVE;
    ck_assert_int_eq(hs_receive(&l, &proof, sizeof proof, &challenge), -1);
    ck_assert_str_eq(l.why, "the peer does not hold the cluster key");
}
END_TEST

START_TEST(handshake_garbage)
{
    struct hs l;
    struct hs_msg hello, out;
    struct hs d;
    ck_assert_int_eq(hs_dial(&d, KEY, strlen(KEY), "node-a", &hello), 0);
    struct {
        const char *why;
        void (*spoil)(struct hs_msg *);
        size_t len;
    } cases[] = {
        {"a handshake message of the wrong size", NULL, sizeof hello - 1},
        {"not a vgpud (wrong magic)", NULL, 0},
        {"another version of the link protocol", NULL, 0},
        {"expected HELLO", NULL, 0},
        {"the peer's node name is not valid", NULL, 0},
        {"the peer's node name is not valid", NULL, 0},
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct hs_msg m = hello;
        if (i == 1)
            m.magic ^= 1;
        if (i == 2)
            m.version = 99;
        if (i == 3)
            m.type = HS_PROVE;
        if (i == 4)
            memset(m.node, 'x', sizeof m.node); /* no terminating NUL */
        if (i == 5)
            strcpy(m.node, "a b/c");
        ck_assert_int_eq(hs_listen(&l, KEY, strlen(KEY), "node-b"), 0);
        ck_assert_int_eq(hs_receive(&l, &m, cases[i].len ? cases[i].len : sizeof m, &out), -1);
        ck_assert_str_eq(l.why, cases[i].why);
        ck_assert_int_eq(l.state, HS_FAILED);
    }
    /* Names and keys this side would start with. */
    ck_assert_int_eq(hs_listen(&l, KEY, 0, "node-b"), -1);
    ck_assert_int_eq(hs_listen(&l, KEY, strlen(KEY), ""), -1);
    ck_assert(remote_node_name_ok("gpu-node_7.rack2"));
    ck_assert(!remote_node_name_ok("no spaces"));
}
END_TEST

static struct link_msg good_msg(void)
{
    struct link_msg m;
    memset(&m, 0, sizeof m);
    m.magic = REMOTE_MAGIC;
    m.version = REMOTE_WIRE_VERSION;
    m.type = LINK_PING;
    m.ngpus = 1;
    strcpy(m.gpus[0].name, "H100");
    m.gpus[0].total = 80;
    m.gpus[0].free = 60;
    return m;
}

START_TEST(link_messages)
{
    struct link_msg m = good_msg(), out;
    ck_assert_int_eq(link_msg_decode(&m, sizeof m, &out), 0);
    ck_assert_str_eq(out.gpus[0].name, "H100");
    ck_assert_int_eq(link_msg_decode(&m, sizeof m - 1, &out), -1);
    m.type = 99;
    ck_assert_int_eq(link_msg_decode(&m, sizeof m, &out), -1);
    m = good_msg();
    m.ngpus = REMOTE_MAX_GPUS + 1;
    ck_assert_int_eq(link_msg_decode(&m, sizeof m, &out), -1);
    m = good_msg();
    m.gpus[0].free = 81;
    ck_assert_int_eq(link_msg_decode(&m, sizeof m, &out), -1);
    m = good_msg();
    memset(m.gpus[0].name, 'x', sizeof m.gpus[0].name);
    ck_assert_int_eq(link_msg_decode(&m, sizeof m, &out), -1);
    m = good_msg();
    m.reserved = 1;
    ck_assert_int_eq(link_msg_decode(&m, sizeof m, &out), -1);
}
END_TEST

START_TEST(peer_specs)
{
    struct remote_peer_config p;
    ck_assert_int_eq(remote_peer_parse("b=10.0.0.2:7070", &p), 0);
    ck_assert_str_eq(p.name, "b");
    ck_assert_str_eq(p.addr, "10.0.0.2:7070");
    ck_assert_int_eq(remote_peer_parse("gpu2=[fe80::1]:7070", &p), 0);
    ck_assert_int_eq(remote_peer_parse("b=10.0.0.2", &p), -1);
    ck_assert_int_eq(remote_peer_parse("b=10.0.0.2:0", &p), -1);
    ck_assert_int_eq(remote_peer_parse("b=10.0.0.2:70000", &p), -1);
    ck_assert_int_eq(remote_peer_parse("=10.0.0.2:7070", &p), -1);
    ck_assert_int_eq(remote_peer_parse("b c=10.0.0.2:7070", &p), -1);
    ck_assert_int_eq(remote_peer_parse("10.0.0.2:7070", &p), -1);
    char host[64];
    uint16_t port;
    ck_assert_int_eq(remote_addr_parse("node7.example:7070", host, sizeof host, &port), 0);
    ck_assert_str_eq(host, "node7.example");
    ck_assert_uint_eq(port, 7070);
    ck_assert_int_eq(remote_addr_parse("[::1]:9", host, sizeof host, &port), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_int_eq(remote_addr_parse(":7070", host, sizeof host, &port), -1);
    ck_assert_int_eq(remote_addr_parse("host:", host, sizeof host, &port), -1);
    ck_assert_int_eq(remote_addr_parse("host:7a", host, sizeof host, &port), -1);
}
END_TEST

/* Links between two vgpuds of one host are told apart (they may go by shared memory). */
START_TEST(local_addresses)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    v4->sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &v4->sin_addr);
    ck_assert(remote_addr_is_local(&ss));
    inet_pton(AF_INET, "127.3.2.1", &v4->sin_addr);
    ck_assert(remote_addr_is_local(&ss));
    inet_pton(AF_INET, "192.0.2.77", &v4->sin_addr); /* TEST-NET-1: no host has it */
    ck_assert(!remote_addr_is_local(&ss));
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    memset(&ss, 0, sizeof ss);
    v6->sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::1", &v6->sin6_addr);
    ck_assert(remote_addr_is_local(&ss));
    inet_pton(AF_INET6, "2001:db8::5", &v6->sin6_addr); /* documentation prefix */
    ck_assert(!remote_addr_is_local(&ss));
    /* An address of one of this host's interfaces, not loopback, where it has one. */
    struct ifaddrs *list = NULL;
    ck_assert_int_eq(getifaddrs(&list), 0);
    for (struct ifaddrs *i = list; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            (ntohl(((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr) >> 24) != 127) {
            memset(&ss, 0, sizeof ss);
            memcpy(&ss, i->ifa_addr, sizeof(struct sockaddr_in));
            ck_assert(remote_addr_is_local(&ss));
        }
    freeifaddrs(list);
    memset(&ss, 0, sizeof ss);
    ss.ss_family = AF_UNIX;
    ck_assert(!remote_addr_is_local(&ss));
}
END_TEST

START_TEST(base64_rfc4648)
{
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    char text[16];
    uint8_t back[16];
    for (int i = 0; i < 7; i++) {
        ck_assert_uint_eq(base64_encode(plain[i], strlen(plain[i]), text), strlen(coded[i]));
        ck_assert_str_eq(text, coded[i]);
        long n = base64_decode(coded[i], back, sizeof back);
        ck_assert_int_eq(n, (long)strlen(plain[i]));
        ck_assert_int_eq(memcmp(back, plain[i], (size_t)n), 0);
    }
    ck_assert_int_eq(base64_decode("Zm9", back, sizeof back), -1);      /* not a multiple of 4 */
    ck_assert_int_eq(base64_decode("Zm=v", back, sizeof back), -1);     /* padding inside */
    ck_assert_int_eq(base64_decode("Zm9v!A==", back, sizeof back), -1); /* not the alphabet */
    ck_assert_int_eq(base64_decode("Zm9vYmFy", back, 5), -1);           /* does not fit */
}
END_TEST

/* What another node wrote in etcd: taken only when it makes sense. */
START_TEST(etcd_entries)
{
    struct etcd_node n = {0}, back;
    strcpy(n.name, "gpu-7");
    strcpy(n.address, "10.0.0.7:7070");
    n.ngpus = 1;
    strcpy(n.gpus[0].name, "H100");
    n.gpus[0].total = 80ull << 30;
    n.gpus[0].free = 60ull << 30;
    n.gpus[0].vgpus = 3;
    struct strbuf b = {0};
    etcd_node_json(&n, &b);
    char *text = strbuf_take(&b, NULL);
    ck_assert_int_eq(etcd_node_parse(text, &back), 0);
    free(text);
    ck_assert_str_eq(back.name, "gpu-7");
    ck_assert_str_eq(back.address, "10.0.0.7:7070");
    ck_assert_uint_eq(back.ngpus, 1);
    ck_assert_uint_eq(back.gpus[0].free, 60ull << 30);
    ck_assert_uint_eq(back.gpus[0].vgpus, 3);
    static const char *const bad[] = {
        "", "not json", "[]", "{\"address\":\"x\",\"gpus\":[]}",                          /* no name */
        "{\"node\":\"a b\",\"address\":\"\",\"gpus\":[]}",                             /* a bad name */
        "{\"node\":\"a\",\"gpus\":{}}",                                                  /* gpus not a list */
        "{\"node\":\"a\",\"gpus\":[{\"name\":\"g\",\"total_mem\":1,\"free_mem\":2,\"vgpus\":0}]}", /* free > total */
        "{\"node\":\"a\",\"gpus\":[{\"name\":\"g\",\"total_mem\":-1,\"free_mem\":0,\"vgpus\":0}]}",
    };
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(etcd_node_parse(bad[i], &back) != 0, "taken: %s", bad[i]);
    char url[64];
    ck_assert_int_eq(etcd_url_parse("etcd://10.0.0.1:2379", url, sizeof url), 0);
    ck_assert_str_eq(url, "http://10.0.0.1:2379");
    ck_assert_int_ne(etcd_url_parse("http://10.0.0.1:2379", url, sizeof url), 0);
    ck_assert_int_ne(etcd_url_parse("etcd://10.0.0.1", url, sizeof url), 0);
}
END_TEST

/* A session message of kind with a tail of len bytes (at most 256), in buf; its length. */
static size_t session_message(uint8_t *buf, uint32_t kind, uint64_t offset, const void *tail, uint32_t len)
{
    struct session_hdr h = {.magic = REMOTE_MAGIC, .version = REMOTE_WIRE_VERSION, .type = LINK_SESSION, .kind = kind,
                            .channel = 3, .offset = offset, .len = len};
    memcpy(buf, &h, sizeof h);
    if (len)
        memcpy(buf + sizeof h, tail, len);
    return sizeof h + len;
}

START_TEST(session_messages)
{
    uint8_t buf[512], rec[24] = {0};
    struct session_hdr h;
    const uint8_t *tail;
    rec[0] = sizeof rec;
    size_t n = session_message(buf, SESS_RECORD, 0, rec, sizeof rec);
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), 0);
    ck_assert_uint_eq(h.channel, 3);
    ck_assert_ptr_eq(tail, buf + sizeof h);
    ck_assert_int_eq(session_msg_decode(buf, n - 1, &h, &tail), -1); /* truncated */
    n = session_message(buf, SESS_RECORD, 0, rec, 12);                /* not a multiple of 8 */
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), -1);
    uint32_t state = VGPU_SLOT_DONE;
    n = session_message(buf, SESS_SLOT, VGPU_MAX_SLOTS, &state, sizeof state); /* no such slot */
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), -1);
    n = session_message(buf, SESS_OPEN, 0, rec, sizeof rec); /* an open of the wrong size */
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), -1);
    n = session_message(buf, SESS_KINDS, 0, NULL, 0);
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), -1);
    /* A batch: its entries in order; one running past the end, or a batch in it, ends the walk. */
    uint8_t batch[96] = {0};
    struct session_entry e1 = {.kind = SESS_DATA, .len = 5, .offset = 4096}, e2 = {.kind = SESS_RECORD, .len = 16};
    memcpy(batch, &e1, sizeof e1);
    memcpy(batch + 16, "hello", 5);
    memcpy(batch + 24, &e2, sizeof e2);
    size_t at = 0;
    struct session_entry e;
    const uint8_t *bytes;
    ck_assert_int_eq(session_batch_next(batch, 56, &at, &e, &bytes), 1);
    ck_assert(e.kind == SESS_DATA && e.offset == 4096 && e.len == 5 && memcmp(bytes, "hello", 5) == 0);
    ck_assert_int_eq(session_batch_next(batch, 56, &at, &e, &bytes), 1);
    ck_assert(e.kind == SESS_RECORD && bytes == batch + 40);
    ck_assert_int_eq(session_batch_next(batch, 56, &at, &e, &bytes), 0);
    at = 0;
    ck_assert_int_eq(session_batch_next(batch, 48, &at, &e, &bytes), 1);
    ck_assert_int_eq(session_batch_next(batch, 48, &at, &e, &bytes), -1); /* the record runs past the end */
    e2.kind = SESS_BATCH;
    memcpy(batch + 24, &e2, sizeof e2);
    at = 24;
    ck_assert_int_eq(session_batch_next(batch, 56, &at, &e, &bytes), -1);
}
END_TEST

/* Bulk transfers: their headers and marks, and where the receiving node puts their bytes. */
START_TEST(bulk_transfers)
{
    struct session_bulk h = {.magic = REMOTE_MAGIC, .channel = 2, .to_server = 1, .offset = 4096, .len = 1000}, b;
    ck_assert_int_eq(session_bulk_decode(&h, sizeof h, 1000, &b), 0);
    ck_assert_int_eq(session_bulk_decode(&h, sizeof h - 1, 1000, &b), -1);
    ck_assert_int_eq(session_bulk_decode(&h, sizeof h, 999, &b), -1); /* not what the link brings */
    struct session_bulk bad = h;
    bad.magic++;
    ck_assert_int_eq(session_bulk_decode(&bad, sizeof bad, 1000, &b), -1);
    bad = h;
    bad.to_server = 2;
    ck_assert_int_eq(session_bulk_decode(&bad, sizeof bad, 1000, &b), -1);
    bad = h;
    bad.len = 0;
    ck_assert_int_eq(session_bulk_decode(&bad, sizeof bad, 0, &b), -1);
    uint64_t size = 1 << 20, got;
    struct session_entry e = {.kind = SESS_BULK, .len = 8, .offset = 0};
    ck_assert_int_eq(session_bulk_entry(&e, (const uint8_t *)&size, &got), 0);
    ck_assert_uint_eq(got, 1 << 20);
    e.len = 4;
    ck_assert_int_eq(session_bulk_entry(&e, (const uint8_t *)&size, &got), -1);
    e.len = 8;
    size = 0;
    ck_assert_int_eq(session_bulk_entry(&e, (const uint8_t *)&size, &got), -1);

    /* Channel 2 of link 7, served here: its bytes land in its data area, in the channel's memory. */
    struct vgpu_channel_layout l;
    ck_assert_int_eq(vgpu_channel_layout_make(&l, 1u << 16, 1u << 16, 8u << 20, 4, 1u << 20), 0);
    int fd = memfd_create("check-bulk", MFD_CLOEXEC);
    ck_assert(fd >= 0 && ftruncate(fd, (off_t)l.map_size) == 0);
    struct bulk_region *r = bulk_region_map(fd, &l);
    struct bulk_table *t = bulk_table_new();
    ck_assert(r && t);
    ck_assert_int_eq(bulk_table_add(t, 7, 2, true, r), 0);
    void *dst, *token;
    ck_assert_int_eq(bulk_table_target(t, 7, &h, sizeof h, 1000, &dst, &token), 0);
    ck_assert(bulk_region_has(token, dst, 1000));
    memset(dst, 0x5a, 1000);
    uint8_t seen[1000];
    ck_assert(pread(fd, seen, sizeof seen, (off_t)(l.data_off + 4096)) == (ssize_t)sizeof seen);
    ck_assert(seen[0] == 0x5a && seen[999] == 0x5a);
    bulk_region_release(r); /* the channel goes; the table and the transfer still hold it */
    bulk_table_done(t, token, dst, 1000, true);
    struct vgpu_channel_ctl ctl; /* toward the serving node: no client to wake there */
    ck_assert(pread(fd, &ctl, sizeof ctl, 0) == (ssize_t)sizeof ctl);
    ck_assert_uint_eq(ctl.to_client.seq, 0);
    bad = h;
    bad.to_server = 0; /* toward the tenant: no channel of that name here */
    ck_assert_int_eq(bulk_table_target(t, 7, &bad, sizeof bad, 1000, &dst, &token), 1);
    ck_assert_int_eq(bulk_table_target(t, 8, &h, sizeof h, 1000, &dst, &token), 1); /* another link */
    bad = h;
    bad.offset = (8u << 20) - 999; /* past the data area's end */
    ck_assert_int_eq(bulk_table_target(t, 7, &bad, sizeof bad, 1000, &dst, &token), -1);
    bad.offset = UINT64_MAX - 10;
    ck_assert_int_eq(bulk_table_target(t, 7, &bad, sizeof bad, 1000, &dst, &token), -1);
    bulk_table_remove(t, r); /* the last hold: unmapped */
    ck_assert_int_eq(bulk_table_target(t, 7, &h, sizeof h, 1000, &dst, &token), 1);
    bulk_table_free(t);
    close(fd);
}
END_TEST

/* Bytes landing in a tenant's staging slot mark the slot's granules in its control page, the one
 * holding a transfer's end too, for the client to copy out while the rest comes; bytes elsewhere
 * in the data area mark nothing. */
START_TEST(landed_granules)
{
    struct vgpu_channel_layout l; /* 4 slots of 1 MiB: granules of 16 KiB */
    ck_assert_int_eq(vgpu_channel_layout_make(&l, 1u << 16, 1u << 16, 8u << 20, 4, 1u << 20), 0);
    ck_assert_uint_eq(vgpu_slot_granule(l.slot_size), 16384);
    ck_assert_uint_eq(vgpu_slot_granule(4096), 4096);
    int fd = memfd_create("check-landed", MFD_CLOEXEC);
    ck_assert(fd >= 0 && ftruncate(fd, (off_t)l.map_size) == 0);
    struct bulk_region *r = bulk_region_map(fd, &l);
    struct bulk_table *t = bulk_table_new();
    ck_assert(r && t);
    ck_assert_uint_eq(bulk_region_piece(r, 0, 0), 0);
    ck_assert_uint_eq(bulk_region_piece(r, 0, 1), 16384);
    ck_assert_uint_eq(bulk_region_piece(r, 3u << 20, 500000), 507904); /* 31 granules */
    ck_assert_uint_eq(bulk_region_piece(r, 4u << 20, 500000), 0);      /* past the slots: whole */
    ck_assert_int_eq(bulk_table_add(t, 7, 2, false, r), 0);
    struct vgpu_channel_ctl ctl;
    struct {
        uint64_t offset, len;
    } lands[] = {
        {(1u << 20) + 19 * 16384, 5 * 16384}, /* slot 1, granules 19-23, before those ahead of it */
        {1u << 20, 300000},                   /* slot 1 from its start: granules 0-18, the 19th partly */
        {3u << 20, 1u << 20},                 /* all of slot 3 */
        {4u << 20, 1u << 20},                 /* a pinned block's bytes, past the slots */
    };
    for (size_t i = 0; i < sizeof lands / sizeof lands[0]; i++) {
        struct session_bulk h = {.magic = REMOTE_MAGIC, .channel = 2, .to_server = 0, .offset = lands[i].offset,
                                 .len = lands[i].len};
        void *dst, *token;
        ck_assert_int_eq(bulk_table_target(t, 7, &h, sizeof h, h.len, &dst, &token), 0);
        bulk_table_done(t, token, dst, h.len, true);
    }
    ck_assert(pread(fd, &ctl, sizeof ctl, 0) == (ssize_t)sizeof ctl);
    ck_assert_uint_eq(ctl.slot_landed[0], 0);
    ck_assert_uint_eq(ctl.slot_landed[1], (1ull << 24) - 1);
    ck_assert_uint_eq(ctl.slot_landed[2], 0);
    ck_assert_uint_eq(ctl.slot_landed[3], ~0ull);
    for (unsigned s = 4; s < VGPU_MAX_SLOTS; s++)
        ck_assert_uint_eq(ctl.slot_landed[s], 0);
    /* Each landing that marked granules rang the client's bell (it may have stopped looking). */
    ck_assert_uint_eq(ctl.to_client.seq, 3);
    /* A transfer that failed to land marks nothing. */
    struct session_bulk h = {.magic = REMOTE_MAGIC, .channel = 2, .to_server = 0, .offset = 0, .len = 65536};
    void *dst, *token;
    ck_assert_int_eq(bulk_table_target(t, 7, &h, sizeof h, h.len, &dst, &token), 0);
    bulk_table_done(t, token, dst, h.len, false);
    ck_assert(pread(fd, &ctl, sizeof ctl, 0) == (ssize_t)sizeof ctl);
    ck_assert_uint_eq(ctl.slot_landed[0], 0);
    ck_assert_uint_eq(ctl.to_client.seq, 3);
    bulk_region_release(r);
    bulk_table_free(t);
    close(fd);
}
END_TEST

/* A served channel's ring, written by vgpud: records and data-area bytes go in as they come, in
 * order; what does not fit waits, behind it whatever comes later (data bytes too: a record before
 * them may read what they replace), until the poller has read enough; a ring whose consumer index
 * the worker broke takes nothing more. */
static size_t ring_record(uint8_t *buf, uint32_t seq, uint32_t size)
{
    memset(buf, 0, size);
    struct vgpu_req_hdr h = {.size = size, .op = 1, .seq = seq};
    memcpy(buf, &h, sizeof h);
    buf[size - 1] = (uint8_t)seq;
    return size;
}

static size_t batch_entry(uint8_t *batch, size_t at, uint32_t kind, uint64_t offset, const void *bytes, uint32_t len)
{
    struct session_entry e = {.kind = kind, .len = len, .offset = offset};
    memcpy(batch + at, &e, sizeof e);
    memcpy(batch + at + sizeof e, bytes, len);
    return at + sizeof e + ((len + 7u) & ~7u);
}

/* The next record the poller reads: its seq, or -1 when there is none. */
static int read_seq(struct vgpu_ring *cons)
{
    uint8_t rec[VGPU_MAX_RECORD];
    int n = vgpu_ring_read(cons, rec, sizeof rec);
    ck_assert_int_ge(n, 0);
    if (n == 0)
        return -1;
    vgpu_ring_release(cons);
    struct vgpu_req_hdr h;
    memcpy(&h, rec, sizeof h);
    ck_assert_uint_eq(h.size, (uint32_t)n);
    ck_assert_uint_eq(rec[n - 1], (uint8_t)h.seq);
    return (int)h.seq;
}

START_TEST(served_rings)
{
    struct vgpu_channel_layout l;
    ck_assert_int_eq(vgpu_channel_layout_make(&l, 8192, 8192, 1u << 20, 4, 64u << 10), 0);
    uint8_t *base = mmap(NULL, (size_t)l.map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(base != MAP_FAILED);
    struct vgpu_channel_ctl *ctl = (struct vgpu_channel_ctl *)(void *)base;
    struct vgpu_ring cons;
    ck_assert_int_eq(vgpu_ring_attach(&cons, &ctl->req, base + l.req_off, l.req_size, true), 0);
    struct served_ring *r = served_ring_new(base, &l);
    ck_assert_ptr_nonnull(r);
    uint8_t rec[1024], batch[16384];
    /* Eighteen records of 512 bytes: the ring holds sixteen. */
    for (uint32_t i = 0; i < 18; i++)
        ck_assert_int_eq(served_ring_put(r, SESS_RECORD, 0, rec, ring_record(rec, i, 512)), 0);
    ck_assert(served_ring_waiting(r));
    /* Bytes for the data area wait behind them, and so does a batch of two records. */
    uint8_t *data = base + l.data_off;
    ck_assert_int_eq(served_ring_put(r, SESS_DATA, 4096, (const uint8_t *)"later", 5), 0);
    size_t at = batch_entry(batch, 0, SESS_RECORD, 0, rec, (uint32_t)ring_record(rec, 18, 512));
    at = batch_entry(batch, at, SESS_BULK, 0, &(uint64_t){4096}, 8); /* landed already: nothing to post */
    at = batch_entry(batch, at, SESS_RECORD, 0, rec, (uint32_t)ring_record(rec, 19, 512));
    ck_assert_int_eq(served_ring_put(r, SESS_BATCH, 0, batch, at), 0);
    ck_assert_int_eq(memcmp(data + 4096, "\0\0\0\0\0", 5), 0);
    /* The poller reads three: two records go, then the bytes, then one of the batch's. */
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(read_seq(&cons), i);
    ck_assert_int_eq(served_ring_flush(r), 0);
    ck_assert_int_eq(memcmp(data + 4096, "later", 5), 0);
    ck_assert(served_ring_waiting(r));
    for (int i = 3; i < 19; i++)
        ck_assert_int_eq(read_seq(&cons), i);
    ck_assert_int_eq(read_seq(&cons), -1);
    ck_assert_int_eq(served_ring_flush(r), 0);
    ck_assert(!served_ring_waiting(r));
    ck_assert_int_eq(read_seq(&cons), 19);
    /* Nothing waits: a record goes at once. What a ring cannot carry, and bytes outside the data
     * area, are dropped; other kinds are nothing to post. */
    ck_assert_int_eq(served_ring_put(r, SESS_RECORD, 0, rec, ring_record(rec, 20, 64)), 0);
    ck_assert_int_eq(read_seq(&cons), 20);
    ck_assert_int_eq(served_ring_put(r, SESS_RECORD, 0, rec, 12), 0);   /* not a multiple of 8 */
    ck_assert_int_eq(served_ring_put(r, SESS_RECORD, 0, batch, 8192), 0); /* more than half the ring */
    ck_assert_int_eq(served_ring_put(r, SESS_DATA, l.data_size - 2, (const uint8_t *)"abc", 3), 0);
    ck_assert_int_eq(served_ring_put(r, SESS_SLOT, 0, (const uint8_t *)"abcd", 4), 0);
    ck_assert_int_eq(read_seq(&cons), -1);
    ck_assert_ptr_null(served_ring_failure(r));
    /* The worker breaks the consumer index: the next record that needs room finds it. */
    for (uint32_t i = 30; !served_ring_waiting(r); i++) {
        ck_assert_uint_lt(i, 50);
        ck_assert_int_eq(served_ring_put(r, SESS_RECORD, 0, rec, ring_record(rec, i, 512)), 0);
    }
    __atomic_store_n(&ctl->req.cons, 0x80000000u, __ATOMIC_RELEASE);
    ck_assert_int_eq(served_ring_flush(r), -1);
    ck_assert_ptr_nonnull(served_ring_failure(r));
    ck_assert_int_eq(served_ring_put(r, SESS_RECORD, 0, rec, ring_record(rec, 60, 64)), -1);
    ck_assert_int_eq(served_ring_flush(r), -1);
    served_ring_free(r);
    /* Indexes that are not a ring's from the start: no ring. */
    __atomic_store_n(&ctl->req.cons, 12345u, __ATOMIC_RELEASE);
    ck_assert_ptr_null(served_ring_new(base, &l));
    munmap(base, (size_t)l.map_size);
}
END_TEST

/* Pushes between two serving nodes: their messages, and their bytes landing in the session whose
 * key they show, on any link, and nowhere else. */
START_TEST(pushes)
{
    uint8_t buf[512], key[SESSION_KEY_BYTES] = {1, 2, 3};
    struct session_hdr h;
    const uint8_t *tail;
    size_t n = session_message(buf, SESS_OPENED, 0, key, sizeof key); /* the key comes with the answer */
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), 0);
    n = session_message(buf, SESS_OPENED, 0, NULL, 0);
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), -1);
    struct session_push q = {.target_node = "d", .target_channel = 2, .size = 1000};
    n = session_message(buf, SESS_PUSH, 4096, &q, sizeof q);
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), 0);
    n = session_message(buf, SESS_PUSH, 4096, &q, sizeof q - 8);
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), -1);
    struct session_push_data d = {.tenant_node = "a", .request = 9};
    n = session_message(buf, SESS_PUSH_DATA, 0, &d, sizeof d);
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), 0);
    uint64_t request = 9;
    n = session_message(buf, SESS_PUSH_DONE, 0, &request, sizeof request);
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), 0);
    n = session_message(buf, SESS_PUSH_DONE, 0, &request, 4);
    ck_assert_int_eq(session_msg_decode(buf, n, &h, &tail), -1);

    struct session_push_bulk p = {.magic = REMOTE_MAGIC, .channel = 2, .offset = 4096, .len = 1000,
                                  .tenant_node = "a"}, got;
    memcpy(p.key, key, sizeof key);
    ck_assert_int_eq(session_push_bulk_decode(&p, sizeof p, 1000, &got), 0);
    ck_assert_int_eq(session_push_bulk_decode(&p, sizeof p, 999, &got), -1);
    struct session_push_bulk big = p;
    big.len = SESSION_PUSH_MAX + 1;
    ck_assert_int_eq(session_push_bulk_decode(&big, sizeof big, big.len, &got), -1);
    struct vgpu_channel_layout l;
    ck_assert_int_eq(vgpu_channel_layout_make(&l, 1u << 16, 1u << 16, 8u << 20, 4, 1u << 20), 0);
    int fd = memfd_create("check-push", MFD_CLOEXEC);
    ck_assert(fd >= 0 && ftruncate(fd, (off_t)l.map_size) == 0);
    struct bulk_region *r = bulk_region_map(fd, &l);
    struct bulk_table *t = bulk_table_new();
    ck_assert(r && t);
    ck_assert_int_eq(bulk_table_add_pushes(t, "a", 2, key, r), 0);
    void *dst, *token;
    ck_assert_int_eq(bulk_table_target(t, 5, &p, sizeof p, 1000, &dst, &token), 0); /* from any node */
    memset(dst, 0x77, 1000);
    uint8_t seen[1000];
    ck_assert(pread(fd, seen, sizeof seen, (off_t)(l.data_off + 4096)) == (ssize_t)sizeof seen);
    ck_assert(seen[0] == 0x77 && seen[999] == 0x77);
    bulk_table_done(t, token, dst, 1000, true);
    struct session_push_bulk bad = p;
    bad.key[0] ^= 1; /* not its key */
    ck_assert_int_eq(bulk_table_target(t, 5, &bad, sizeof bad, 1000, &dst, &token), 1);
    bad = p;
    snprintf(bad.tenant_node, sizeof bad.tenant_node, "b"); /* another node's tenant's channel 2 */
    ck_assert_int_eq(bulk_table_target(t, 5, &bad, sizeof bad, 1000, &dst, &token), 1);
    /* An ordinary bulk transfer does not find the push target, whatever its link. */
    struct session_bulk plain = {.magic = REMOTE_MAGIC, .channel = 2, .to_server = 1, .offset = 4096, .len = 1000};
    ck_assert_int_eq(bulk_table_target(t, 0, &plain, sizeof plain, 1000, &dst, &token), 1);
    bad = p;
    bad.offset = (8u << 20) - 999; /* past the data area */
    ck_assert_int_eq(bulk_table_target(t, 5, &bad, sizeof bad, 1000, &dst, &token), -1);
    bulk_region_release(r);
    bulk_table_remove(t, r);
    ck_assert_int_eq(bulk_table_target(t, 5, &p, sizeof p, 1000, &dst, &token), 1);
    bulk_table_free(t);
    close(fd);
}
END_TEST

/* The link of the first event of kind the inbox holds (0: none), and its session message's offset;
 * the inbox is emptied. */
static uint64_t take_event(struct remote *r, enum remote_event_kind kind, uint64_t *offset)
{
    struct remote_event *list = remote_inbox_take(r);
    uint64_t link = 0;
    for (struct remote_event *e = list; e && !link; e = e->next)
        if (e->kind == kind) {
            link = e->link;
            struct session_hdr h;
            if (offset && e->len >= sizeof h) {
                memcpy(&h, e->data, sizeof h);
                *offset = h.offset;
            }
        }
    remote_events_free(list);
    return link;
}

/* Wait (10 s at most) for an event of kind from r, sleeping on its descriptor (by_fd) or taking
 * the inbox again and again; its link, and its message's offset (REMOTE_LINK_MSG), or 0. */
static uint64_t wait_event(struct remote *r, enum remote_event_kind kind, bool by_fd, uint64_t *offset)
{
    for (int i = 0; i < 10000; i++) {
        if (by_fd) {
            struct pollfd p = {.fd = remote_inbox_fd(r), .events = POLLIN};
            poll(&p, 1, 1);
        } else {
            usleep(1000);
        }
        uint64_t link = take_event(r, kind, offset);
        if (link)
            return link;
    }
    return 0;
}

/* The configurations of nodes a (listening on host, loopback; its links driven, or on their
 * thread) and b (dialing a there), whose links look on spin_ns after traffic. */
static void pair_configs(const char *host, bool a_driven, int64_t spin_ns, struct remote_config *ca,
                         struct remote_config *cb)
{
    *ca = (struct remote_config){.key_len = sizeof KEY - 1, .spin_ns = spin_ns};
    memcpy(ca->key, KEY, ca->key_len);
    *cb = *ca;
    ca->driven = a_driven;
    int port = 30000 + (int)(getpid() % 20000);
    strcpy(ca->node, "a");
    snprintf(ca->listen, sizeof ca->listen, "%s:%d", host, port);
    strcpy(cb->node, "b");
    char spec[64];
    snprintf(spec, sizeof spec, "a=%s:%d", host, port);
    ck_assert_int_eq(remote_peer_parse(spec, &cb->peers[0]), 0);
    cb->npeers = 1;
}

/* Nodes a and b of pair_configs, started. */
static void start_pair_at(const char *host, bool a_driven, int64_t spin_ns, struct remote **a, struct remote **b)
{
    struct remote_config ca, cb;
    pair_configs(host, a_driven, spin_ns, &ca, &cb);
    const char *err = NULL;
    *a = remote_start(&ca, &err);
    ck_assert_msg(*a, "node a: %s", err ? err : "?");
    *b = remote_start(&cb, &err);
    ck_assert_msg(*b, "node b: %s", err ? err : "?");
}

static void start_pair(bool a_driven, int64_t spin_ns, struct remote **a, struct remote **b)
{
    start_pair_at("127.0.0.1", a_driven, spin_ns, a, b);
}

static bool inbox_readable(struct remote *r)
{
    struct pollfd p = {.fd = remote_inbox_fd(r), .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

/* Node b dials node a over loopback; both links' threads look on 200 us after traffic. Messages go
 * both ways, many in a row (the threads between looking on and sleeping); while a's loop says it
 * takes the inbox on every turn, its descriptor stays quiet and the messages come all the same;
 * once it sleeps on the descriptor again, the descriptor tells of them. */
START_TEST(links_that_look_on)
{
    struct remote *a, *b;
    start_pair(false, 200000, &a, &b);
    uint64_t ab = wait_event(a, REMOTE_LINK_UP, true, NULL), ba = wait_event(b, REMOTE_LINK_UP, true, NULL);
    ck_assert(ab && ba);
    uint8_t msg[512];
    for (uint64_t i = 1; i <= 50; i++) { /* a request and its answer, again and again */
        uint64_t got = 0;
        ck_assert_int_eq(remote_send(b, ba, msg, session_message(msg, SESS_RECORD, i, NULL, 0)), 0);
        ck_assert(wait_event(a, REMOTE_LINK_MSG, true, &got) == ab && got == i);
        if (i % 10 == 0)
            usleep(1000); /* long enough for both threads to go to sleep */
        ck_assert_int_eq(remote_send(a, ab, msg, session_message(msg, SESS_RECORD, i + 1000, NULL, 0)), 0);
        ck_assert(wait_event(b, REMOTE_LINK_MSG, true, &got) == ba && got == i + 1000);
    }
    remote_events_free(remote_inbox_take(a)); /* what the descriptor counted goes */
    remote_inbox_polled(a, true);
    uint64_t got = 0;
    ck_assert_int_eq(remote_send(b, ba, msg, session_message(msg, SESS_RECORD, 7, NULL, 0)), 0);
    ck_assert(wait_event(a, REMOTE_LINK_MSG, false, &got) == ab && got == 7);
    ck_assert_msg(!inbox_readable(a), "the inbox's descriptor was made readable while polled");
    remote_inbox_polled(a, false);
    remote_events_free(remote_inbox_take(a));
    ck_assert_int_eq(remote_send(b, ba, msg, session_message(msg, SESS_RECORD, 8, NULL, 0)), 0);
    struct pollfd p = {.fd = remote_inbox_fd(a), .events = POLLIN};
    ck_assert_msg(poll(&p, 1, 10000) == 1, "the inbox's descriptor stayed quiet after polling ended");
    ck_assert(wait_event(a, REMOTE_LINK_MSG, true, &got) == ab && got == 8);
    remote_stop(b);
    remote_stop(a);
}
END_TEST

/* Driven links' event of kind (their turns, then their descriptors when they may sleep): its link,
 * or 0 after 10 s. */
static uint64_t turn_until(struct remote *r, enum remote_event_kind kind, uint64_t *offset)
{
    for (int i = 0; i < 10000; i++) {
        remote_turn(r);
        uint64_t link = take_event(r, kind, offset);
        if (link)
            return link;
        int ms = remote_wait_ms(r, 1);
        if (ms > 0) {
            int fds[2], n = remote_fds(r, fds);
            struct pollfd p[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
            (void)poll(p, (nfds_t)n, ms);
        }
    }
    return 0;
}

/* Node a's links have no thread (driven): the test turns them, as vgpud's loop does, and sleeps on
 * their descriptors when they let it. The link to b comes up, messages go both ways, a message from
 * b wakes a sleeping a, and links with something to send do not let their caller sleep. */
START_TEST(driven_links)
{
    struct remote *a, *b;
    start_pair(true, 0, &a, &b);
    uint64_t ab = turn_until(a, REMOTE_LINK_UP, NULL), ba = wait_event(b, REMOTE_LINK_UP, true, NULL);
    ck_assert(ab && ba);
    uint8_t msg[512];
    for (uint64_t i = 1; i <= 20; i++) {
        uint64_t got = 0;
        ck_assert_int_eq(remote_send(b, ba, msg, session_message(msg, SESS_RECORD, i, NULL, 0)), 0);
        ck_assert(turn_until(a, REMOTE_LINK_MSG, &got) == ab && got == i);
        ck_assert_int_eq(remote_send(a, ab, msg, session_message(msg, SESS_RECORD, i + 1000, NULL, 0)), 0);
        ck_assert_msg(remote_wait_ms(a, 1000) == 0, "the links let their caller sleep with a message to send");
        remote_turn(a);
        ck_assert(wait_event(b, REMOTE_LINK_MSG, true, &got) == ba && got == i + 1000);
    }
    /* A message in two parts (remote_send2) arrives whole, one part after the other. */
    uint8_t tail[40];
    for (size_t k = 0; k < sizeof tail; k++)
        tail[k] = (uint8_t)(k * 7 + 1);
    size_t whole = session_message(msg, SESS_DATA, 99, tail, sizeof tail);
    ck_assert_int_eq(remote_send2(a, ab, msg, sizeof(struct session_hdr), msg + sizeof(struct session_hdr),
                                  whole - sizeof(struct session_hdr)), 0);
    bool arrived = false;
    for (int i = 0; i < 10000 && !arrived; i++) {
        remote_turn(a);
        struct remote_event *list = remote_inbox_take(b);
        for (struct remote_event *e = list; e; e = e->next)
            if (e->kind == REMOTE_LINK_MSG) {
                ck_assert_uint_eq(e->len, whole);
                ck_assert_msg(memcmp(e->data, msg, whole) == 0, "a message sent in two parts arrived changed");
                arrived = true;
            }
        remote_events_free(list);
        usleep(1000);
    }
    ck_assert_msg(arrived, "a message sent in two parts did not arrive");
    /* a sleeps on its descriptors (up to 10 s); b's message wakes it. */
    for (int i = 0; i < 100; i++) /* what is left of the exchange above */
        remote_turn(a);
    remote_events_free(remote_inbox_take(a));
    while (remote_wait_ms(a, 10000) < 10000)
        remote_turn(a);
    ck_assert_int_eq(remote_send(b, ba, msg, session_message(msg, SESS_RECORD, 77, NULL, 0)), 0);
    int fds[2], n = remote_fds(a, fds);
    struct pollfd p[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
    ck_assert_msg(poll(p, (nfds_t)n, 10000) > 0, "a message did not wake the links' caller");
    uint64_t got = 0;
    ck_assert(turn_until(a, REMOTE_LINK_MSG, &got) == ab && got == 77);
    remote_stop(b);
    remote_stop(a);
}
END_TEST

/* Where a driven node's bulk transfers land (its bulk_target and bulk_done). */
struct landing {
    uint8_t *buf;
    size_t len;
    int targets, done, failed;
};

static int landing_target(void *arg, uint64_t link, const void *hdr, size_t hdr_len, size_t len, void **dst,
                          void **token)
{
    (void)link, (void)hdr, (void)hdr_len;
    struct landing *l = arg;
    if (len > l->len)
        return -1;
    l->targets++;
    *dst = l->buf;
    *token = l;
    return 0;
}

static void landing_done(void *arg, void *token, void *dst, size_t len, bool ok)
{
    (void)arg, (void)token, (void)dst, (void)len;
    struct landing *l = token;
    if (ok)
        l->done++;
    else
        l->failed++;
}

static void bulk_sent_count(void *arg) { (*(int *)arg)++; }

/* Turns driven links on a thread of its own until told to stop. */
struct turner {
    struct remote *r;
    atomic_bool stop;
};

static void *turn_on(void *arg)
{
    struct turner *t = arg;
    while (!atomic_load(&t->stop)) {
        remote_turn(t->r);
        usleep(200);
    }
    return NULL;
}

/* Bulk transfers from b into driven node a over TCP: a's caller sleeps as long as the links let it
 * (10 s asked), yet while a transfer is under way they never let it sleep on their descriptors
 * alone, which do not tell of every step of one (with UCX_TCP_PUT_ENABLE=n, a rendezvous moved by
 * active messages, vgpud stalled until its next tick; that setting is not used here: UCX 1.13 then
 * leaks the endpoints); each lands whole. */
START_TEST(driven_bulk_transfers)
{
    setenv("UCX_TLS", "tcp", 1);
    struct remote_config ca, cb;
    pair_configs("127.0.0.1", true, 0, &ca, &cb);
    const size_t len = 4u << 20;
    struct landing l = {.buf = malloc(len), .len = len};
    uint8_t *data = malloc(len);
    ck_assert(l.buf && data);
    ca.bulk_target = landing_target;
    ca.bulk_done = landing_done;
    ca.bulk_arg = &l;
    const char *err = NULL;
    struct remote *a = remote_start(&ca, &err), *b = remote_start(&cb, &err);
    ck_assert_msg(a && b, "%s", err ? err : "?");
    uint64_t ab = turn_until(a, REMOTE_LINK_UP, NULL), ba = wait_event(b, REMOTE_LINK_UP, true, NULL);
    ck_assert(ab && ba);
    int sent = 0;
    for (int k = 1; k <= 4; k++) {
        for (size_t i = 0; i < len; i++)
            data[i] = (uint8_t)(i * 13 + (size_t)k);
        uint64_t hdr = (uint64_t)k;
        ck_assert_int_eq(remote_send_bulk(b, ba, &hdr, sizeof hdr, data, len, bulk_sent_count, &sent), 0);
        for (int turns = 0; l.done + l.failed < k; turns++) {
            ck_assert_msg(turns < 100000, "transfer %d never landed", k);
            remote_turn(a);
            int ms = remote_wait_ms(a, 10000);
            if (l.targets == k && l.done + l.failed < k) /* under way */
                ck_assert_msg(ms < 10000, "the links let their caller sleep with a transfer under way");
            if (ms > 0) {
                int fds[2], n = remote_fds(a, fds);
                struct pollfd p[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
                (void)poll(p, (nfds_t)n, ms);
            }
        }
        ck_assert_int_eq(l.failed, 0);
        ck_assert_msg(memcmp(l.buf, data, len) == 0, "transfer %d landed changed", k);
    }
    for (int i = 0; i < 1000 && sent < 4; i++) {
        remote_turn(a);
        usleep(1000);
    }
    ck_assert_int_eq(sent, 4);
    /* b's links close while a's are turned, so that they close in order. */
    struct turner tu = {.r = a};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, turn_on, &tu), 0);
    remote_stop(b);
    atomic_store(&tu.stop, true);
    pthread_join(th, NULL);
    remote_stop(a);
    free(data);
    free(l.buf);
}
END_TEST

/* Driven node a and node b of this host, b in a child process that the test stops (SIGSTOP) once
 * their link is up: a's messages fill b's shared memory and wait in UCX, which then will not arm.
 * a's turns find nothing to do; after a moment they nap rather than spin (where processors are
 * scarce, b needs the one they would take), and never sleep long (the messages wait to go). */
START_TEST(stalled_host_peer_naps)
{
    setenv("UCX_TLS", "posix,sysv,self,tcp", 1); /* shared memory (as for two vgpuds of one host) */
    struct remote_config ca, cb;
    pair_configs("127.0.0.1", true, 0, &ca, &cb);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        const char *err = NULL;
        struct remote *b = remote_start(&cb, &err);
        if (!b)
            _exit(1);
        for (;;)
            pause();
    }
    const char *err = NULL;
    struct remote *a = remote_start(&ca, &err);
    ck_assert_msg(a, "node a: %s", err ? err : "?");
    uint64_t ab = turn_until(a, REMOTE_LINK_UP, NULL);
    ck_assert_msg(ab, "no link from the child's node");
    ck_assert_msg(remote_link_through_memory(a, ab), "a link through shared memory is not known as one");
    for (int i = 0; i < 100; i++) /* (the link's first exchanges settle) */
        remote_turn(a);
    ck_assert_int_eq(kill(child, SIGSTOP), 0);
    static uint8_t msg[4096], data[4000];
    for (uint64_t i = 0; i < 400; i++)
        ck_assert_int_eq(remote_send(a, ab, msg, session_message(msg, SESS_DATA, i, data, sizeof data)), 0);
    int naps = 0, sleeps = 0, turns = 0;
    for (; turns < 100000 && naps < 50; turns++) {
        remote_turn(a);
        int ms = remote_wait_ms(a, 100);
        naps += ms > 0 && ms < 100;
        sleeps += ms == 100;
        if (ms > 0 && ms < 100)
            usleep((useconds_t)ms * 1000);
    }
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    ck_assert_msg(sleeps == 0, "the links let their caller sleep with messages waiting in UCX");
    ck_assert_msg(naps == 50, "the links spun on a stalled peer of this host (%d naps in %d turns)", naps, turns);
    remote_stop(a);
}
END_TEST

/* The same two nodes of one host linked over TCP only: their link is a network's (a staging slot's
 * bytes go back in larger pieces), and a link that does not exist is neither. */
START_TEST(link_by_network)
{
    setenv("UCX_TLS", "tcp", 1);
    struct remote *a, *b;
    start_pair(false, 0, &a, &b);
    uint64_t ab = wait_event(a, REMOTE_LINK_UP, true, NULL), ba = wait_event(b, REMOTE_LINK_UP, true, NULL);
    ck_assert(ab && ba);
    ck_assert_msg(!remote_link_through_memory(a, ab) && !remote_link_through_memory(b, ba),
                  "a link over TCP is taken for one through shared memory");
    ck_assert(!remote_link_through_memory(a, ab + 1) && !remote_link_through_memory(a, 0));
    remote_stop(b);
    remote_stop(a);
}
END_TEST

/* A peer named by its host's name rather than an address: looked up without blocking the links'
 * turns, then dialed; the link comes up and carries a message. */
START_TEST(peer_by_name)
{
    struct remote *a, *b;
    start_pair_at("localhost", false, 0, &a, &b);
    uint64_t ab = wait_event(a, REMOTE_LINK_UP, true, NULL), ba = wait_event(b, REMOTE_LINK_UP, true, NULL);
    ck_assert_msg(ab && ba, "no link to a peer named localhost");
    uint8_t msg[512];
    uint64_t got = 0;
    ck_assert_int_eq(remote_send(b, ba, msg, session_message(msg, SESS_RECORD, 5, NULL, 0)), 0);
    ck_assert(wait_event(a, REMOTE_LINK_MSG, true, &got) == ab && got == 5);
    remote_stop(b);
    remote_stop(a);
}
END_TEST

/* What a record reads from and writes to the data area, as the relay and the feed carry it. */
START_TEST(record_data_ranges)
{
    struct vgpu_channel_layout l;
    ck_assert_int_eq(vgpu_channel_layout_make(&l, 1u << 16, 1u << 16, 8u << 20, 4, 1u << 20), 0);
    struct record_io io;
    struct vgpu_req_CopyHtoD h = {.hdr = {.size = sizeof h, .op = VGPU_OP_CopyHtoD}, .offset = 4096, .size = 100, .slot = 2};
    ck_assert_int_eq(record_io_of((const uint8_t *)&h, sizeof h, &l, &io), 0);
    ck_assert(io.in_off == 4096 && io.in_size == 100 && !io.out_size && io.slot == 2 && !io.reply);
    h.hdr.flags = VGPU_REQ_WANT_REPLY;
    h.offset = (8u << 20) - 50; /* past the data area's end: left out (the worker refuses it) */
    h.slot = 4;                  /* no such slot */
    ck_assert_int_eq(record_io_of((const uint8_t *)&h, sizeof h, &l, &io), 0);
    ck_assert(!io.in_size && io.slot == VGPU_NO_SLOT && io.reply);
    h.offset = 4096;
    h.flags = VGPU_COPY_STAYS; /* the bytes are on the serving node already: nothing to carry */
    ck_assert_int_eq(record_io_of((const uint8_t *)&h, sizeof h, &l, &io), 0);
    ck_assert(!io.in_size && !io.out_size);
    struct vgpu_req_CopyDtoH d = {.hdr = {.size = sizeof d, .op = VGPU_OP_CopyDtoH}, .offset = 8192, .size = 10,
                                  .slot = VGPU_NO_SLOT, .flags = VGPU_COPY_STAYS};
    ck_assert_int_eq(record_io_of((const uint8_t *)&d, sizeof d, &l, &io), 0);
    ck_assert(!io.in_size && !io.out_size); /* nor to bring back */
    d.flags = 0;
    ck_assert_int_eq(record_io_of((const uint8_t *)&d, sizeof d, &l, &io), 0);
    ck_assert(io.out_off == 8192 && io.out_size == 10 && !io.in_size);
    struct vgpu_req_Copy3D c = {.hdr = {.size = sizeof c, .op = VGPU_OP_Copy3D}, .src = 0, .src_pitch = 64, .width = 32,
                                .height = 4, .depth = 1, .host = VGPU_COPY3D_SRC_HOST, .slot = 1};
    ck_assert_int_eq(record_io_of((const uint8_t *)&c, sizeof c, &l, &io), 0);
    ck_assert(io.in_off == 0 && io.in_size == 3 * 64 + 32 && !io.out_size && io.slot == 1);
    struct vgpu_req_HostFn f = {.hdr = {.size = sizeof f, .op = VGPU_OP_HostFn}, .word = 4096, .ticket = 7};
    ck_assert_int_eq(record_io_of((const uint8_t *)&f, sizeof f, &l, &io), 0);
    ck_assert(io.word == 4096 && io.ticket == 7);
    f.ticket = 0; /* a graph's host node: not carried */
    ck_assert_int_eq(record_io_of((const uint8_t *)&f, sizeof f, &l, &io), 0);
    ck_assert(io.word == UINT64_MAX);
    struct vgpu_req_ModuleLoad m = {.hdr = {.size = sizeof m, .op = VGPU_OP_ModuleLoad}, .offset = 0, .size = 4096};
    ck_assert_int_eq(record_io_of((const uint8_t *)&m, sizeof m, &l, &io), 0);
    ck_assert(io.in_size == 4096 && io.reply);
    struct vgpu_req_hdr bad = {.size = sizeof bad, .op = VGPU_OP_COUNT};
    ck_assert_int_eq(record_io_of((const uint8_t *)&bad, sizeof bad, &l, &io), -1);
    ck_assert_int_eq(record_io_of((const uint8_t *)&h, 8, &l, &io), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("remote");
    TCase *t = tcase_create("remote");
    tcase_add_test(t, hmac_rfc4231);
    tcase_add_test(t, handshake_both_hold_the_key);
    tcase_add_test(t, handshake_wrong_key);
    tcase_add_test(t, handshake_garbage);
    tcase_add_test(t, link_messages);
    tcase_add_test(t, peer_specs);
    tcase_add_test(t, local_addresses);
    tcase_add_test(t, base64_rfc4648);
    tcase_add_test(t, driven_links);
    tcase_add_test(t, driven_bulk_transfers);
    tcase_add_test(t, peer_by_name);
    tcase_add_test(t, stalled_host_peer_naps);
    tcase_add_test(t, link_by_network);
    tcase_add_test(t, etcd_entries);
    tcase_add_test(t, session_messages);
    tcase_add_test(t, record_data_ranges);
    tcase_add_test(t, bulk_transfers);
    tcase_add_test(t, landed_granules);
    tcase_add_test(t, served_rings);
    tcase_add_test(t, pushes);
    tcase_add_test(t, links_that_look_on);
    suite_add_tcase(s, t);
    return vgpu_check_run(s);
}
