/* Streams as queues, events, graph capture and replay.
 *
 * Every asynchronous operation is appended to its stream's queue and runs
 * only when something waits for it, in order, on the waiting host thread.
 * Dependencies between streams are operations too: a wait for another
 * stream's queue up to a position (cudaStreamWaitEvent, and the implicit
 * waits of the legacy default stream: its operations wait for the blocking
 * streams' earlier work, and theirs for its earlier work).  A wait always
 * names work queued before it, so running a queue never needs itself.
 *
 * Capture: while a stream captures, what would be queued on it is kept in
 * the capture instead; the graph is that list, and a graph launch queues
 * one operation that runs the list. */
#include "emu_internal.h"

#include <chrono>
#include <unordered_map>

using clock_type = std::chrono::steady_clock;

/* An event's most recent record: when its operation ran. */
struct event_mark {
    bool done;
    clock_type::time_point time;
};

struct CUevent_st {
    unsigned int flags;
    hcnn_emu::stream_ptr stream; /* of the last record, null before the first */
    uint64_t position;           /* the record's position in that queue */
    std::shared_ptr<event_mark> mark;
    uint64_t capture_id; /* non-zero: last recorded in that capture */
};

namespace hcnn_emu {

namespace {

/* State: the legacy stream, the created streams (in creation order, so
 * that a device-wide wait runs them in the same order every time), events,
 * graphs, and the capture ids handed out. */
struct registry {
    stream_ptr legacy;
    std::vector<stream_ptr> streams;
    std::unordered_map<CUevent_st *, std::unique_ptr<CUevent_st>> events;
    std::unordered_map<CUgraph_st *, std::unique_ptr<CUgraph_st>> graphs;
    std::unordered_map<CUgraphExec_st *, std::unique_ptr<CUgraphExec_st>> execs;
    uint64_t next_capture;
};

registry &reg() {
    static registry *r = [] {
        auto *n = new registry{};
        n->legacy = std::make_shared<CUstream_st>();
        n->legacy->flags = cudaStreamDefault;
        n->legacy->legacy = true;
        n->next_capture = 1;
        return n;
    }();
    return *r;
}

CUevent_st *find_event(cudaEvent_t e) {
    auto &m = reg().events;
    return m.count(e) ? e : nullptr;
}

/* A capture whose rules forbid a potentially unsafe call from this thread
 * (cudaThreadExchangeStreamCaptureMode: the thread's own mode is Global). */
bool forbids(const capture &c) {
    return c.mode == cudaStreamCaptureModeGlobal ||
           (c.mode == cudaStreamCaptureModeThreadLocal && c.thread == std::this_thread::get_id());
}

/* Queues a wait for `other` up to its current end, if it has work pending. */
void wait_for_pending(CUstream_st &s, const stream_ptr &other) {
    if (other->executed == other->enqueued)
        return;
    uint64_t upto = other->enqueued;
    s.queue.push_back([other, upto] { drain(*other, upto); });
    ++s.enqueued;
}

void push(CUstream_st &s, op o) {
    s.queue.push_back(std::move(o));
    ++s.enqueued;
}

cudaError_t end_capture(CUstream_st &s, cudaGraph_t *graph) {
    std::unique_ptr<capture> c = std::move(s.cap);
    if (c->invalidated)
        return cudaErrorStreamCaptureInvalidated;
    auto *g = new CUgraph_st{std::move(c->ops)};
    reg().graphs[g].reset(g);
    *graph = g;
    return cudaSuccess;
}

} // namespace

stream_ptr find_stream(cudaStream_t handle) {
    registry &r = reg();
    if (!handle)
        return r.legacy;
    for (const stream_ptr &s : r.streams)
        if (s.get() == handle)
            return s;
    return nullptr;
}

bool is_blocking(const CUstream_st &s) { return !s.legacy && !(s.flags & cudaStreamNonBlocking); }

cudaError_t enqueue(cudaStream_t handle, op o) {
    stream_ptr s = find_stream(handle);
    if (!s)
        return cudaErrorInvalidResourceHandle;
    if (s->cap) {
        if (s->cap->invalidated)
            return cudaErrorStreamCaptureInvalidated;
        s->cap->ops.push_back(std::move(o));
        return cudaSuccess;
    }
    registry &r = reg();
    if (s->legacy) {
        cudaError_t e = check_legacy_during_capture();
        if (e != cudaSuccess)
            return e;
        for (const stream_ptr &b : r.streams)
            if (is_blocking(*b))
                wait_for_pending(*s, b);
    } else if (is_blocking(*s)) {
        wait_for_pending(*s, r.legacy);
    }
    push(*s, std::move(o));
    return cudaSuccess;
}

void drain(CUstream_st &s, uint64_t upto) {
    while (s.executed < upto) {
        if (s.running)
            die("cudaStreamSynchronize", "a stream's queue waits for itself (emulation bug)");
        op o = std::move(s.queue.front());
        s.queue.pop_front();
        s.running = true;
        o();
        s.running = false;
        ++s.executed;
    }
}

void drain_all() {
    registry &r = reg();
    drain(*r.legacy, r.legacy->enqueued);
    for (size_t i = 0; i < r.streams.size(); ++i)
        drain(*r.streams[i], r.streams[i]->enqueued);
}

void drain_legacy() {
    registry &r = reg();
    drain(*r.legacy, r.legacy->enqueued);
    for (size_t i = 0; i < r.streams.size(); ++i)
        if (is_blocking(*r.streams[i]))
            drain(*r.streams[i], r.streams[i]->enqueued);
}

cudaError_t check_unsafe_during_capture() {
    cudaError_t e = cudaSuccess;
    for (const stream_ptr &s : reg().streams)
        if (s->cap && forbids(*s->cap)) {
            s->cap->invalidated = true;
            e = cudaErrorStreamCaptureUnsupported;
        }
    return e;
}

cudaError_t check_legacy_during_capture() {
    cudaError_t e = cudaSuccess;
    for (const stream_ptr &s : reg().streams)
        if (s->cap && is_blocking(*s)) {
            s->cap->invalidated = true;
            e = cudaErrorStreamCaptureImplicit;
        }
    return e;
}

} // namespace hcnn_emu

using namespace hcnn_emu;

extern "C" {

/* ---- Streams ------------------------------------------------------------ */

cudaError_t cudaStreamCreate(cudaStream_t *pStream) {
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags) {
    if (!pStream || (flags & ~static_cast<unsigned int>(cudaStreamNonBlocking)))
        return record(cudaErrorInvalidValue);
    api_lock lock(api_mutex());
    auto s = std::make_shared<CUstream_st>();
    s->flags = flags;
    reg().streams.push_back(s);
    *pStream = s.get();
    return cudaSuccess;
}

/* Pending work still runs (CUDA completes it after the call returns); the
 * object lives on in the waits and events that refer to it. */
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    api_lock lock(api_mutex());
    registry &r = reg();
    for (auto it = r.streams.begin(); it != r.streams.end(); ++it) {
        if (it->get() != stream)
            continue;
        if ((*it)->cap)
            return record(cudaErrorStreamCaptureUnsupported);
        drain(**it, (*it)->enqueued);
        r.streams.erase(it);
        return cudaSuccess;
    }
    return record(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    api_lock lock(api_mutex());
    stream_ptr s = find_stream(stream);
    if (!s)
        return record(cudaErrorInvalidResourceHandle);
    if (s->cap) {
        s->cap->invalidated = true;
        return record(cudaErrorStreamCaptureUnsupported);
    }
    if (s->legacy) /* the legacy stream's work waits for the blocking streams' */
        drain_legacy();
    else
        drain(*s, s->enqueued);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    api_lock lock(api_mutex());
    cudaError_t e = check_unsafe_during_capture();
    if (e != cudaSuccess)
        return record(e);
    drain_all();
    return cudaSuccess;
}

/* the capture range of a profiler attached to the process (nsys, CUPTI):
 * the emulation has none */
cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    api_lock lock(api_mutex());
    stream_ptr s = find_stream(stream);
    CUevent_st *e = find_event(event);
    if (!s || !e)
        return record(cudaErrorInvalidResourceHandle);
    if (flags != 0)
        return record(cudaErrorInvalidValue);
    if (e->capture_id) {
        if (s->cap && s->cap->id == e->capture_id)
            return cudaSuccess; /* one captured stream: already in order */
        for (const stream_ptr &c : reg().streams)
            if (c->cap && c->cap->id == e->capture_id)
                die("cudaStreamWaitEvent", "joining a second stream to a capture through an "
                                           "event is not emulated: capture on one stream");
        return record(cudaErrorCapturedEvent);
    }
    if (s->cap) {
        if (!e->stream)
            return cudaSuccess;
        s->cap->invalidated = true; /* a capture may not wait for outside work */
        return record(cudaErrorStreamCaptureIsolation);
    }
    if (!e->stream || e->stream == s) /* never recorded: a no-op, as in CUDA */
        return cudaSuccess;
    stream_ptr src = e->stream;
    uint64_t upto = e->position + 1;
    return record(enqueue(stream, [src, upto] { drain(*src, upto); }));
}

/* ---- Events ------------------------------------------------------------- */

cudaError_t cudaEventCreate(cudaEvent_t *event) {
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    const unsigned int known = cudaEventBlockingSync | cudaEventDisableTiming;
    if (!event || (flags & ~known))
        return record(cudaErrorInvalidValue);
    api_lock lock(api_mutex());
    auto *e = new CUevent_st{flags, nullptr, 0, nullptr, 0};
    reg().events[e].reset(e);
    *event = e;
    return cudaSuccess;
}

/* The time stamp is taken when the record runs in its queue (host clock). */
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    api_lock lock(api_mutex());
    CUevent_st *e = find_event(event);
    stream_ptr s = find_stream(stream);
    if (!e || !s)
        return record(cudaErrorInvalidResourceHandle);
    if (s->cap) {
        /* inside a capture the event only orders captured work (no node) */
        if (s->cap->invalidated)
            return record(cudaErrorStreamCaptureInvalidated);
        e->capture_id = s->cap->id;
        return cudaSuccess;
    }
    auto mark = std::make_shared<event_mark>();
    cudaError_t err = enqueue(stream, [mark] {
        mark->time = clock_type::now();
        mark->done = true;
    });
    if (err != cudaSuccess)
        return record(err);
    e->stream = s;
    e->position = s->enqueued - 1;
    e->mark = mark;
    e->capture_id = 0;
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    api_lock lock(api_mutex());
    CUevent_st *e = find_event(event);
    if (!e)
        return record(cudaErrorInvalidResourceHandle);
    if (e->capture_id)
        return record(cudaErrorCapturedEvent);
    if (!e->mark || e->mark->done)
        return cudaSuccess;
    /* Not ready; a GPU gets there on its own, so a polling loop must end:
     * run the queue up to the event for the next query. */
    drain(*e->stream, e->position + 1);
    return cudaErrorNotReady; /* not an error: CUDA does not record it */
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    api_lock lock(api_mutex());
    CUevent_st *e = find_event(event);
    if (!e)
        return record(cudaErrorInvalidResourceHandle);
    if (e->capture_id)
        return record(cudaErrorCapturedEvent);
    if (e->mark)
        drain(*e->stream, e->position + 1);
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms)
        return record(cudaErrorInvalidValue);
    api_lock lock(api_mutex());
    CUevent_st *a = find_event(start), *b = find_event(end);
    if (!a || !b)
        return record(cudaErrorInvalidResourceHandle);
    if (a->capture_id || b->capture_id)
        return record(cudaErrorCapturedEvent);
    if (!a->mark || !b->mark || ((a->flags | b->flags) & cudaEventDisableTiming))
        return record(cudaErrorInvalidResourceHandle);
    if (!a->mark->done || !b->mark->done)
        return record(cudaErrorNotReady);
    std::chrono::duration<double, std::milli> d = b->mark->time - a->mark->time;
    *ms = static_cast<float>(d.count());
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    api_lock lock(api_mutex());
    /* a pending record keeps its mark alive; the event itself can go */
    return record(reg().events.erase(event) ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

/* ---- Graphs ------------------------------------------------------------- */

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    api_lock lock(api_mutex());
    stream_ptr s = find_stream(stream);
    if (!s)
        return record(cudaErrorInvalidResourceHandle);
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
        mode != cudaStreamCaptureModeRelaxed)
        return record(cudaErrorInvalidValue);
    if (s->legacy)
        return record(cudaErrorStreamCaptureUnsupported);
    if (s->cap)
        return record(cudaErrorIllegalState);
    s->cap.reset(new capture{reg().next_capture++, mode, std::this_thread::get_id(), false, {}});
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph) {
    if (!pGraph)
        return record(cudaErrorInvalidValue);
    api_lock lock(api_mutex());
    stream_ptr s = find_stream(stream);
    if (!s)
        return record(cudaErrorInvalidResourceHandle);
    *pGraph = nullptr;
    if (!s->cap)
        return record(cudaErrorIllegalState);
    if (s->cap->mode != cudaStreamCaptureModeRelaxed &&
        s->cap->thread != std::this_thread::get_id())
        return record(cudaErrorStreamCaptureWrongThread);
    return record(end_capture(*s, pGraph));
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                  enum cudaStreamCaptureStatus *pCaptureStatus) {
    if (!pCaptureStatus)
        return record(cudaErrorInvalidValue);
    api_lock lock(api_mutex());
    stream_ptr s = find_stream(stream);
    if (!s)
        return record(cudaErrorInvalidResourceHandle);
    if (s->legacy) {
        for (const stream_ptr &b : reg().streams)
            if (b->cap && is_blocking(*b))
                return record(cudaErrorStreamCaptureImplicit);
    }
    *pCaptureStatus = !s->cap ? cudaStreamCaptureStatusNone
                      : s->cap->invalidated ? cudaStreamCaptureStatusInvalidated
                                            : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
    if (!pGraphExec || flags != 0) /* no instantiation flag is emulated */
        return record(cudaErrorInvalidValue);
    api_lock lock(api_mutex());
    if (!reg().graphs.count(graph))
        return record(cudaErrorInvalidValue);
    auto *x = new CUgraphExec_st{std::make_shared<const std::vector<op>>(graph->ops)};
    reg().execs[x].reset(x);
    *pGraphExec = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
    api_lock lock(api_mutex());
    if (!reg().execs.count(graphExec))
        return record(cudaErrorInvalidValue);
    std::shared_ptr<const std::vector<op>> ops = graphExec->ops;
    return record(enqueue(stream, [ops] {
        for (const op &o : *ops)
            o();
    }));
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
    api_lock lock(api_mutex());
    return record(reg().execs.erase(graphExec) ? cudaSuccess : cudaErrorInvalidValue);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    api_lock lock(api_mutex());
    return record(reg().graphs.erase(graph) ? cudaSuccess : cudaErrorInvalidValue);
}

} /* extern "C" */
