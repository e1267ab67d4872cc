/* Graphs in the frontend. A graph is either the worker's (captured from a stream, or built there
 * from one of the others; its nodes are named by their index in the worker's order) or kept here
 * (made by cuGraphCreate and built node by node: api_graph_nodes.c), and built in the worker when it
 * is instantiated (graph_build.c). Executable graphs are always the worker's. */
#ifndef VGPU_FRONTEND_GRAPH_H
#define VGPU_FRONTEND_GRAPH_H

#include "fe.h"

/* An edge into a node: the node it depends on, and the edge's data. */
struct fe_edge {
    struct fe_graph_node *from;
    CUgraphEdgeData data;
};

struct fe_kernel_node {
    CUfunction func;
    CUkernel kern; /* a captured node's: the kernel its function stands for, if any */
    CUcontext ctx;
    uint32_t grid[3], block[3], shmem;
    uint8_t *args; /* the packed parameters (malloc'd) */
    uint32_t size;
    void **argv;   /* pointers to each parameter in args, as cuGraphKernelNodeGetParams gives them */
    CUlaunchAttribute attrs[VGPU_MAX_LAUNCH_ATTRS];
    unsigned nattrs;
};

struct fe_graph_node {
    uint64_t handle;
    struct fe_graph *graph;
    uint32_t index; /* the worker's: its index in the worker's order; here: its place in graph->list */
    /* nodes kept here */
    CUgraphNodeType type;
    struct fe_edge *deps;
    size_t ndeps, deps_cap;
    uint64_t cloned_from; /* the node this one is a copy of (cuGraphNodeFindInClone) */
    uint32_t build_id;    /* while building */
    bool disabled;        /* an executable graph's plan: built as an empty node (cuGraphNodeSetEnabled) */
    bool captured;        /* a node of a capture that runs, named by its build id (index) */
    /* a free node of memory a capture allocated (the driver's allocation node, in another graph):
     * freed when the graph is built, by its capture, as a stream-ordered free is */
    bool frees_captured;
    /* a node of a graph the worker's driver made (a captured one) whose kernel parameters were
     * asked for: u.kernel holds them, for the pointers cuGraphKernelNodeGetParams gives */
    bool fetched;
    /* such a node's access policy window, kept here as launches keep none (graph_captured.c) */
    bool has_window;
    CUkernelNodeAttrValue window;
    union {
        struct fe_kernel_node kernel;
        struct {
            CUDA_MEMCPY3D p;
            CUcontext ctx;
        } memcpy;
        CUDA_MEMSET_NODE_PARAMS_v2 memset;
        CUDA_HOST_NODE_PARAMS_v2 host;
        CUevent event;
        struct fe_graph *child; /* owned by the node */
        struct {
            CUDA_MEM_ALLOC_NODE_PARAMS p; /* its accessDescs: access, the node's own copy */
            CUmemAccessDesc *access;
            struct fe_graph_mem *mem;
        } alloc;
        CUdeviceptr free_dptr;
        struct {
            CUcontext ctx;
            unsigned count, flags;
            CUstreamBatchMemOpParams *ops; /* the node's own copy */
        } memop;
        struct {
            CUDA_CONDITIONAL_NODE_PARAMS p; /* p.phGraph_out: out */
            struct fe_graph **bodies;       /* p.size of them, owned by the node */
            CUgraph *out;                   /* their handles, as the application is given them */
        } cond;
    } u;
};

/* A graph or an executable graph (kind FE_GRAPH or FE_GRAPH_EXEC). */
struct fe_graph {
    uint64_t handle;
    uint32_t id;
    enum fe_kind kind;
    struct fe_ctx *ctx;
    struct fe_chan *ch;
    /* the worker's graphs: handles of their nodes by index, once asked for */
    uint64_t *nodes;
    size_t node_count;
    /* graphs kept here: their nodes in the order made */
    bool here;
    struct fe_graph_node **list;
    size_t count, cap;
    uint64_t cloned_from; /* the graph this one is a copy of */
    bool owned;           /* a child graph node's, or a conditional node's body: destroyed with it */
    struct fe_graph *root; /* a conditional node's body: the graph at the top, whose handles it uses */
    /* Conditional handles (graph_cond.c): a graph that has them is built into a graph of the
     * worker's made with the first (the handles are that graph's), its anchor, shared by reference
     * with the plans made of the graph. An anchor keeps the handles. */
    struct fe_graph *anchor;
    unsigned anchor_refs;
    uint64_t *handles;
    size_t nhandles, handles_cap;
    bool capturing;       /* a stream's capture, not ended yet: the worker has not got it */
    bool adopted;         /* an empty graph of the application's a capture into it made its own */
    /* a capture's: the nodes it has named while it runs (its dependencies, nodes added to it), by
     * their build ids (capture_deps.c) */
    struct fe_graph_node **cnodes;
    size_t ncnodes;
    /* the bodies of conditional nodes added to it while it was captured (graph_cond.c) */
    struct fe_cond_bodies {
        struct fe_graph **bodies;
        CUgraph *out;
        unsigned n;
    } *kept;
    size_t nkept, kept_cap;
    /* executable graphs of graphs kept here: their own copy (a plan, for per-node updates), and the
     * host nodes their build made */
    uint64_t flags;
    struct fe_graph *plan;
    struct fe_host_node **hosts; /* (a captured graph's too: its captured host functions) */
    size_t nhosts, hosts_cap;
    /* user objects it holds references to (api_user_object.c) */
    struct fe_user_ref *urefs;
    size_t nurefs;
};

/* The references a graph holds to user objects: given up when it goes (an executable graph's once
 * its device is idle), copied to the executable graphs and clones made from it. */
struct fe_user_ref;
void fe_graph_user_refs_drop(struct fe_graph *g);
CUresult fe_graph_user_refs_copy(struct fe_graph *to, const struct fe_graph *from);

struct fe_graph *fe_graph_new(enum fe_kind kind, struct fe_ctx *c, struct fe_chan *ch);
/* to holds the host nodes from holds too (a copy of the worker's graph from, or one made from it). */
CUresult fe_graph_hosts_share(struct fe_graph *to, const struct fe_graph *from);
/* g holds host node n from now on (n's reference is g's). */
CUresult fe_graph_host_keep(struct fe_graph *g, struct fe_host_node *n);
/* Forget a graph here (and, for the worker's, ask the worker to destroy it). */
void fe_graph_free(struct fe_graph *g);
CUresult fe_graph_destroy(struct fe_graph *g);
struct fe_graph *fe_graph_of(enum fe_kind kind, uint64_t handle);
/* Instantiate one of the worker's graphs into a new executable graph, or as the worker's executable
 * graph of id exec. */
CUresult fe_graph_instantiate_worker(struct fe_graph *g, uint64_t flags, struct fe_graph **exec);
CUresult fe_graph_instantiate_as(struct fe_graph *g, uint32_t exec, uint64_t flags);

/* api_graph_nodes.c: graphs kept here. */
/* A node of g with a handle of its own, in no list yet. */
struct fe_graph_node *fe_graph_node_alloc(struct fe_graph *g, CUgraphNodeType type, uint32_t index);
void fe_graph_nodes_free(struct fe_graph *g);
/* Free what a node holds of its own (kernel arguments). */
void fe_kernel_node_clear(struct fe_kernel_node *k);
/* The other versions of a kernel node's parameters as CUDA_KERNEL_NODE_PARAMS (v2), and a generic
 * node's memset parameters as CUDA_MEMSET_NODE_PARAMS, for nodes kept here and captured alike. */
CUDA_KERNEL_NODE_PARAMS fe_kernel_params_of_v1(const CUDA_KERNEL_NODE_PARAMS_v1 *p);
CUDA_KERNEL_NODE_PARAMS fe_kernel_params_of_v3(const CUDA_KERNEL_NODE_PARAMS_v3 *p);
CUDA_MEMSET_NODE_PARAMS fe_memset_params_of_v2(const CUDA_MEMSET_NODE_PARAMS_v2 *p);
/* Memset parameters the driver takes: elements of 1, 2 or 4 bytes, rows no longer than their pitch. */
bool fe_memset_params_ok(const CUDA_MEMSET_NODE_PARAMS *p);

/* api_graph.c: a node of the worker's graph g at index (a handle made for it before stays: n an
 * alias then). */
CUresult fe_graph_worker_node_put(struct fe_graph *g, struct fe_graph_node *n, uint32_t index);

/* graph_shape.c: a captured graph's nodes and edges, once its capture has ended. */
/* Add node (a scratch node of captured graph g, parameters set) after deps (with their edges'
 * data, NULL: default edges); *out its handle. */
CUresult fe_graph_worker_add(struct fe_graph_node *node, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
                             CUgraphNode *out);
/* Destroy node n of a captured graph (the later nodes' indexes go down by one). */
CUresult fe_graph_worker_destroy(struct fe_graph_node *n);
/* Add (or remove) the edges from[i] -> to[i] of captured graph g, with their data. */
CUresult fe_graph_worker_edges(struct fe_graph *g, const CUgraphNode *from, const CUgraphNode *to,
                               const CUgraphEdgeData *data, size_t n, bool add);

/* graph_captured.c: the nodes of a captured graph, ended. */
/* Node h if it is one (NULL otherwise). */
struct fe_graph_node *fe_graph_worker_node(CUgraphNode h);
/* Free a node handle of a captured graph (what of its kernel parameters it kept too). */
void fe_graph_worker_node_free(struct fe_graph_node *n);
/* Kernel node n's parameters, asked once and kept in n->u.kernel (n->fetched). */
CUresult fe_graph_worker_kernel(struct fe_graph_node *n);
/* New parameters for node n in its graph, or in e (not NULL), an executable graph made from it;
 * INVALID_VALUE when n is NULL (not a node of a captured graph). */
CUresult fe_graph_worker_kernel_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_KERNEL_NODE_PARAMS *p);
CUresult fe_graph_worker_kernel_set_v1(struct fe_graph_node *n, struct fe_graph *e, const CUDA_KERNEL_NODE_PARAMS_v1 *p);
CUresult fe_graph_worker_memset_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_MEMSET_NODE_PARAMS *p);
/* A generic node's: a kernel's or a memset's (NOT_SUPPORTED for others). */
CUresult fe_graph_worker_node_set(struct fe_graph_node *n, struct fe_graph *e, const CUgraphNodeParams *p);
/* The other nodes' parameters (GraphNodeParams), each node's type checked by the worker. A copy
 * node's (pinned host memory as the tenant's address of it; set: pinned host memory only). */
CUresult fe_graph_worker_memcpy(struct fe_graph_node *n, CUDA_MEMCPY3D *p);
CUresult fe_graph_worker_memcpy_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_MEMCPY3D *p);
/* A host node's function and data; new ones (a host node of the graph's or e's own). */
CUresult fe_graph_worker_host(struct fe_graph_node *n, CUDA_HOST_NODE_PARAMS *p);
CUresult fe_graph_worker_host_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_HOST_NODE_PARAMS *p);
/* An event record or wait node's event (type says which), or a new one. */
CUresult fe_graph_worker_event(struct fe_graph_node *n, CUgraphNodeType type, CUevent *ev);
CUresult fe_graph_worker_event_set(struct fe_graph_node *n, struct fe_graph *e, CUgraphNodeType type, CUevent ev);
/* A child graph node's graph: a copy of the worker's, made once and kept with the node (changes to
 * it stay in it); in executable graph e, graph h instead. */
CUresult fe_graph_worker_child(struct fe_graph_node *n, CUgraph *out);
CUresult fe_graph_worker_child_set(struct fe_graph_node *n, struct fe_graph *e, CUgraph h);
/* A batch memory operation node's operations (the array kept with the node until asked again), or
 * new ones. */
CUresult fe_graph_worker_memop(struct fe_graph_node *n, CUDA_BATCH_MEM_OP_NODE_PARAMS *p);
CUresult fe_graph_worker_memop_set(struct fe_graph_node *n, struct fe_graph *e, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p);
/* A memory node's parameters (allocation, or with p NULL the address a free node frees). */
CUresult fe_graph_worker_alloc(struct fe_graph_node *n, CUDA_MEM_ALLOC_NODE_PARAMS *p);
CUresult fe_graph_worker_free_ptr(struct fe_graph_node *n, CUdeviceptr *dptr);
/* Memset node n's parameters. */
CUresult fe_graph_worker_memset(struct fe_graph_node *n, CUDA_MEMSET_NODE_PARAMS *p);
/* Kernel node n's launch attribute attr: its value, or (set) a new one. */
CUresult fe_graph_worker_attr(struct fe_graph_node *n, bool set, CUkernelNodeAttrID attr, CUkernelNodeAttrValue *v);
/* Whether node h runs in e, an executable graph made from its graph, or (set) whether it shall. */
CUresult fe_graph_worker_enabled(struct fe_graph *e, CUgraphNode h, bool set, unsigned *enabled);
/* A deep copy (child graphs too); each node's cloned_from names its original. */
CUresult fe_graph_copy(const struct fe_graph *g, struct fe_graph **out);
/* Node queries answered here (VGPU_GRAPH_NODES_*), the driver's way. */
CUresult fe_graph_here_nodes(struct fe_graph *g, unsigned what, struct fe_graph_node *node, CUgraphNode *out,
                             CUgraphEdgeData *edges, size_t *num);
CUresult fe_graph_here_edges(struct fe_graph *g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *data,
                             size_t *num);
/* Copy the parameters of node src into dst (same type). */
CUresult fe_graph_node_params_copy(struct fe_graph_node *dst, const struct fe_graph_node *src);
/* A copy of a node's parameters alone (no handle, no edges), freed by fe_graph_node_scratch_free. */
CUresult fe_graph_copy_node(const struct fe_graph_node *n, struct fe_graph_node **out);
void fe_graph_node_scratch_free(struct fe_graph_node *n);
/* A child graph node takes a copy of graph h. */
CUresult fe_graph_child_set(struct fe_graph_node *n, CUgraph h);

/* graph_mem.c: the memory of an allocation node of g, made with the node (params checked as the
 * driver checks them), held by each copy of the node and freed with the last (fe_graph_mem_owns:
 * fe.h). */
struct fe_graph_mem;
CUresult fe_graph_mem_new(struct fe_graph *g, const CUDA_MEM_ALLOC_NODE_PARAMS *p, struct fe_graph_mem **out);
/* Whether an allocation node's parameters are ones g may have (its context's device, pinned). */
CUresult fe_graph_mem_check(const struct fe_graph *g, const CUDA_MEM_ALLOC_NODE_PARAMS *p);
CUdeviceptr fe_graph_mem_ptr(const struct fe_graph_mem *m);
void fe_graph_mem_hold(struct fe_graph_mem *m);
void fe_graph_mem_put(struct fe_graph_mem *m);
/* The modelled graph pool of a device (graph_mem.c's header): an executable graph of plan was
 * launched on s; a trim; what it holds and its high watermark; that watermark reset. */
void fe_graph_mem_launched(const struct fe_graph *plan, CUstream s);
void fe_graph_mem_trim(int device);
void fe_graph_mem_figures(int device, size_t *held, size_t *high);
void fe_graph_mem_reset_high(int device);

/* capture_deps.c: the dependencies of a capture that runs, and nodes added to its graph. */
/* The stream a capture's graph g is being captured on (false: g is no capture's). */
bool fe_capture_stream_of(const struct fe_graph *g, uint32_t *sid, CUstream *handle);
/* The node of capture graph g named id (made on first use; NULL when out of memory). */
struct fe_graph_node *fe_capture_node(struct fe_graph *g, uint32_t id);
void fe_capture_nodes_free(struct fe_graph *g);
/* The indexes of the nodes the capture on sid named in g (its capture's graph), asked before the
 * capture ends (*idx: one per g->ncnodes, UINT32_MAX for those not known; NULL when none); then,
 * ended, those nodes become nodes of the worker's graph g and the others go. */
CUresult fe_capture_nodes_index(struct fe_graph *g, struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, uint32_t **idx);
void fe_capture_nodes_settle(struct fe_graph *g, uint32_t *idx);
/* The capture's dependencies now, as build ids (*ids malloc'd), and (edges not NULL) their edges'
 * data (*edges malloc'd, as many). */
CUresult fe_capture_deps_ids(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, uint32_t **ids,
                             CUgraphEdgeData **edges, size_t *n);
/* The build ids of deps (nodes of the graph the capture on sid goes into) for that capture: a node
 * the capture made has one, the worker names one the graph had before it. */
CUresult fe_capture_dep_ids(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, const CUgraphNode *deps, size_t n,
                            uint32_t *ids);
/* Add node (a scratch node of capture graph g with its parameters set) to the capture after deps,
 * leaving the capture's dependencies as they were; *out its handle. */
CUresult fe_capture_add(struct fe_graph_node *node, const CUgraphNode *deps, const CUgraphEdgeData *data, size_t n,
                        CUgraphNode *out);
/* graph_build.c: issue one node on a capturing stream (sid, s) of c; *named: the worker's name of it
 * (node->build_id VGPU_BUILD_NEXT: the worker picks one). Host nodes it makes stay with the graph
 * the capture makes. */
CUresult fe_graph_issue_node(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, CUstream s, struct fe_graph_node *node,
                             uint32_t *named);
/* GraphBuild's NAME (name the node at index of the graph captured into `id`, VGPU_BUILD_NEXT: the
 * worker picks; *out the name) or INDEX (*out: the index of the node named id) on capturing stream
 * sid. */
CUresult fe_capture_map(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, bool name, uint32_t id, uint32_t index,
                        uint32_t *out);
/* GraphBuild's DEPS (or DEPS_ADD) on a capturing stream; with data (not NULL, not all default
 * edges), DEPS_DATA. */
CUresult fe_capture_set_deps(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, const uint32_t *ids, size_t n,
                             bool add);
CUresult fe_capture_set_deps_data(struct fe_ctx *c, struct fe_chan *ch, uint32_t sid, const uint32_t *ids,
                                  const CUgraphEdgeData *data, size_t n, bool add);
/* Whether d is a default edge's data (NULL: one). */
bool fe_edge_default(const CUgraphEdgeData *d);
/* Whether d is edge data the driver takes between nodes of those types (-1: not known here). */
bool fe_edge_data_ok(const CUgraphEdgeData *d, int from_type, int to_type);

/* Captures the build makes (api_graph.c): on s into the worker's graph `graph`, emptied first; one
 * the worker began on s (a conditional node's body), noted here; the end of either. */
CUresult fe_capture_begin_into(CUstream s, uint32_t graph);
CUresult fe_capture_note(CUstream s);
CUresult fe_capture_end_into(CUstream s);

/* graph_cond.c: conditional nodes. */
/* A node's parameters (checked as the driver checks them; bodies made). */
CUresult fe_graph_cond_set(struct fe_graph_node *n, CUgraphNodeParams *p);
/* dst takes a copy of src's bodies (a plan's copy). */
CUresult fe_graph_cond_copy(struct fe_graph_node *dst, const struct fe_graph_node *src);
void fe_graph_cond_clear(struct fe_graph_node *n);
/* A node added to a capture's graph: its graph keeps its bodies (the worker's, named here) from now
 * on; freed with the graph. */
CUresult fe_graph_cond_keep(struct fe_graph_node *n);
void fe_graph_cond_kept_free(struct fe_graph *g);
/* Whether g has conditional nodes (it cannot be cloned or be a child graph then). */
bool fe_graph_has_conditional(const struct fe_graph *g);
/* Take or let go of a reference to an anchor. */
struct fe_graph *fe_graph_anchor_hold(struct fe_graph *a);
void fe_graph_anchor_put(struct fe_graph *a);

/* graph_build.c: build a graph kept here in the worker, as a new graph of the worker's (or into its
 * anchor, which *built is then: see fe_graph_built_done); *hosts and *nhosts get the host nodes made
 * (each runs its function at every replay until dropped). */
CUresult fe_graph_build(struct fe_graph *g, struct fe_graph **built, struct fe_host_node ***hosts, size_t *nhosts);
void fe_graph_hosts_drop(struct fe_chan *ch, struct fe_host_node **hosts, size_t n);
/* What a build made, once instantiated or used: destroyed unless it is an anchor. */
void fe_graph_built_done(struct fe_graph *built);
/* Instantiate a graph kept here: build its plan, instantiate that. */
CUresult fe_graph_instantiate_here(struct fe_graph *g, uint64_t flags, struct fe_graph **exec);
/* The executable graph takes g's parameters (cuGraphExecUpdate); *result a CUgraphExecUpdateResult. */
CUresult fe_graph_exec_update(struct fe_graph *e, struct fe_graph *g, CUgraphExecUpdateResult *result);
/* Rebuild an executable graph's plan after one of its nodes changed, and update it. */
CUresult fe_graph_exec_replan(struct fe_graph *e);

#endif
