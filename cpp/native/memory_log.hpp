// The memory-ordering log: which stream last wrote (and which streams since read) each byte range.
//
// Why by memory, not by Python object: a fresh view, the parent array or a torch tensor over the same
// allocation name the same bytes through different objects; ordering must follow the bytes
// (docs/architecture.md "Memory ordering"). This header is pure bookkeeping (no driver, no Python):
// `hazards` says what work about to touch a range must wait for, `record` notes work just submitted.
// The driver side (memory_order.cpp) turns hazards into event waits. Guarded by the GIL.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <vector>

namespace kb::rt {

// An event recorded after some work, shared by every span that refers to it; released (back to the
// pool) when the last span drops it.
struct EventRef {
  uint64_t handle = 0;
  std::function<void(uint64_t)> release;
  ~EventRef() { if (release && handle) release(handle); }
};
using EventPtr = std::shared_ptr<EventRef>;

// Work on `stream` that touched a range. `event` is recorded right after that work for streams that
// may be destroyed behind our back (foreign streams); null for streams we see die (bridge streams,
// whose end records a "retired" event) and the never-destroyed default streams: those are recorded
// lazily, at the moment a consumer needs them, which orders after the work just as well.
struct Use {
  uint64_t stream = 0;
  int device = 0;
  uint64_t generation = 0;   // which bridge stream of that handle (0: default or foreign stream)
  EventPtr event;
};

// Two handles of one stream: the legacy default stream is both 0 and CU_STREAM_LEGACY (1). The default
// streams (0, 1, 2) exist once per device, so there the device tells streams apart; any other handle
// names one stream of one device.
inline bool same_stream(uint64_t a, int da, uint64_t b, int db) {
  if (a > 2 || b > 2) return a == b;
  return (a == b || (a <= 1 && b <= 1)) && da == db;
}
inline bool same_stream(const Use& u, uint64_t stream, int device) { return same_stream(u.stream, u.device, stream, device); }

// A stream named by handle and device (the device matters for the default streams only).
struct StreamRef {
  uint64_t stream = 0;
  int device = 0;
};

struct Span {
  uint64_t hi = 0;                   // [lo, hi), lo is the map key
  Use writer;                        // the last work that wrote the bytes
  std::vector<Use> readers;          // streams that read them since (other than the writer's)
  std::vector<StreamRef> observed;   // streams already ordered after `writer`
};

class MemoryLog {
 public:
  // Uses that work on `stream` (of `device`) touching [lo, hi) must wait for: every writer on another
  // stream that `stream` has not already waited for, and (write) every reader on another stream.
  void hazards(uint64_t lo, uint64_t hi, uint64_t stream, int device, bool write, std::vector<Use>& out) const {
    if (spans_.empty() || lo >= hi) return;
    auto one = [&](const Span& s) {
      if (!same_stream(s.writer, stream, device) && !contains(s.observed, stream, device)) add(out, s.writer);
      if (write)
        for (const Use& r : s.readers)
          if (!same_stream(r, stream, device)) add(out, r);
    };
    if (const Span* s = exact(lo, hi)) {   // spans are disjoint: an exact one is the only overlap
      one(*s);
      return;
    }
    for (auto it = first_overlap(lo); it != spans_.end() && it->first < hi; ++it) one(it->second);
  }

  // True when some span in [lo, hi) was written on another stream (a read there must be recorded).
  bool read_matters(uint64_t lo, uint64_t hi, uint64_t stream, int device) const {
    if (spans_.empty() || lo >= hi) return false;
    if (const Span* s = exact(lo, hi)) return !same_stream(s->writer, stream, device);
    for (auto it = first_overlap(lo); it != spans_.end() && it->first < hi; ++it)
      if (!same_stream(it->second.writer, stream, device)) return true;
    return false;
  }

  // Work just submitted on `use.stream` touched [lo, hi): a write supersedes the overlapped bytes'
  // history (the writer has waited for it, see hazards), a read joins each overlapped span's readers.
  void record(uint64_t lo, uint64_t hi, const Use& use, bool write) {
    if (lo >= hi) return;
    if (!write) {
      if (spans_.empty()) return;
      auto one = [&](Span& s) {
        if (same_stream(s.writer, use.stream, use.device)) return;
        if (!contains(s.observed, use.stream, use.device)) s.observed.push_back(StreamRef{use.stream, use.device});
        for (Use& r : s.readers)
          if (same_stream(r, use.stream, use.device)) { r = use; return; }
        s.readers.push_back(use);
      };
      if (Span* s = exact(lo, hi)) one(*s);
      else
        for (auto it = first_overlap(lo); it != spans_.end() && it->first < hi; ++it) one(it->second);
      return;
    }
    if (Span* same = exact(lo, hi)) {   // the common case: same buffer again
      same->writer = use;
      same->readers.clear();
      same->observed.clear();
      return;
    }
    cut(lo, hi);
    Span s;
    s.hi = hi;
    s.writer = use;
    spans_.emplace(lo, std::move(s));
    ++generation_;
    if (spans_.size() > prune_at_ && pruner_) prune(pruner_);
  }

  // The bytes [lo, hi) are gone (freed): forget their history.
  void forget(uint64_t lo, uint64_t hi) {
    if (!spans_.empty() && lo < hi) cut(lo, hi);
  }

  // Drop the uses `done(use)` says have completed; spans with nothing pending go.
  void prune(const std::function<bool(const Use&)>& done) {
    for (auto it = spans_.begin(); it != spans_.end();) {
      Span& s = it->second;
      s.readers.erase(std::remove_if(s.readers.begin(), s.readers.end(), done), s.readers.end());
      if (s.readers.empty() && done(s.writer)) it = spans_.erase(it);
      else ++it;
    }
    ++generation_;
    prune_at_ = std::max<size_t>(kPruneFloor, 2 * spans_.size());
  }

  void set_pruner(std::function<bool(const Use&)> fn) { pruner_ = std::move(fn); }
  size_t size() const { return spans_.size(); }
  const std::map<uint64_t, Span>& spans() const { return spans_; }
  void clear() {
    spans_.clear();
    ++generation_;
  }

 private:
  static constexpr size_t kPruneFloor = 512;

  static bool contains(const std::vector<StreamRef>& v, uint64_t s, int device) {
    for (const StreamRef& x : v) if (same_stream(x.stream, x.device, s, device)) return true;
    return false;
  }
  static void add(std::vector<Use>& out, const Use& u) {
    for (const Use& o : out)
      if (same_stream(o, u.stream, u.device) && o.event == u.event) return;
    out.push_back(u);
  }

  std::map<uint64_t, Span>::const_iterator first_overlap(uint64_t lo) const {
    auto it = spans_.upper_bound(lo);
    if (it != spans_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.hi > lo) return prev;
    }
    return it;
  }
  std::map<uint64_t, Span>::iterator first_overlap(uint64_t lo) {
    auto it = spans_.upper_bound(lo);
    if (it != spans_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.hi > lo) return prev;
    }
    return it;
  }

  // Remove [lo, hi) from every span, keeping the parts outside it (with their history).
  void cut(uint64_t lo, uint64_t hi) {
    ++generation_;
    auto it = first_overlap(lo);
    while (it != spans_.end() && it->first < hi) {
      const uint64_t s_lo = it->first;
      Span s = std::move(it->second);
      it = spans_.erase(it);
      if (s.hi > hi) {
        Span right = s;
        it = spans_.emplace_hint(it, hi, std::move(right));
      }
      if (s_lo < lo) {
        s.hi = lo;
        spans_.emplace(s_lo, std::move(s));
      }
      if (it != spans_.end() && it->first == hi) break;
    }
  }

  // The span that is exactly [lo, hi), or null. A launch touches the same few buffers again and again:
  // a small direct-mapped cache of exact spans answers without walking the map (each tree node a cache
  // miss once the driver call has evicted them). Entries are valid for one generation, which every
  // insertion and removal ends (pointers to map values are stable until their node is erased).
  Span* exact(uint64_t lo, uint64_t hi) const {
    Hit& h = hits_[(lo >> 8) % kHits];
    if (h.generation == generation_ && h.lo == lo && h.hi == hi) return h.span;
    auto it = spans_.find(lo);
    if (it == spans_.end() || it->second.hi != hi) return nullptr;
    h = Hit{lo, hi, const_cast<Span*>(&it->second), generation_};
    return h.span;
  }

  struct Hit {
    uint64_t lo = 0, hi = 0;
    Span* span = nullptr;
    uint64_t generation = 0;
  };
  static constexpr size_t kHits = 8;
  mutable Hit hits_[kHits];
  uint64_t generation_ = 1;
  std::map<uint64_t, Span> spans_;
  size_t prune_at_ = kPruneFloor;
  std::function<bool(const Use&)> pruner_;
};

}  // namespace kb::rt
