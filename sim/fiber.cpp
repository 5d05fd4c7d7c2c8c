#include "sim/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "sim/check.h"
#include "sim/error.h"

#ifdef RANKSIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define RANKSIM_START_SWITCH(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define RANKSIM_FINISH_SWITCH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define RANKSIM_START_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define RANKSIM_FINISH_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif

// Fiber stacks are reused (within a pool) and their mappings come back at old addresses (after
// a pool's munmap), while AddressSanitizer's shadow of that memory may still hold the poison of
// frames from the previous fiber -- a fiber that ended by an exception leaves its scopes
// poisoned. A new fiber would then trip "stack-use-after-scope" on its own fresh frames, at
// random depending on where the kernel put the mapping. Every stack is unpoisoned when it is
// handed out (allocate(): the only way a slab's memory becomes a stack).
#ifdef RANKSIM_ASAN
#define RANKSIM_UNPOISON(addr, bytes) ASAN_UNPOISON_MEMORY_REGION(addr, bytes)
#else
#define RANKSIM_UNPOISON(addr, bytes) ((void)(addr), (void)(bytes))
#endif

namespace ranksim::sim {

namespace {
constexpr size_t kSlabTarget = 8u << 20;  // map stacks 8 MiB at a time
constexpr unsigned char kPaint = 0xA5;    // StackOptions::measure's fill
}  // namespace

StackPool::StackPool(StackOptions options) : options_(options) {
  page_ = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t min_bytes = 4 * page_;
  stack_bytes_ = (std::max(options.size, min_bytes) + page_ - 1) / page_ * page_;
  slot_bytes_ = stack_bytes_ + (options.guard_page ? page_ : 0);
  slots_per_slab_ = std::max<size_t>(1, kSlabTarget / slot_bytes_);
}

StackPool::~StackPool() {
  for (auto& [base, bytes] : slabs_) ::munmap(base, bytes);
}

void StackPool::grow() {
  const size_t bytes = slots_per_slab_ * slot_bytes_;
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    throw Error("cannot map " + std::to_string(bytes) + " bytes for fiber stacks (" + std::strerror(errno) + ") with " +
                std::to_string(in_use_) + " stacks in use; use a smaller stack size or fewer ranks");
  }
  slabs_.emplace_back(base, bytes);
  mapped_bytes_ += bytes;
  char* p = static_cast<char*>(base);
  // Push in reverse so stacks are handed out in address order (friendlier to the TLB).
  for (size_t i = slots_per_slab_; i-- > 0;) {
    char* slot = p + i * slot_bytes_;
    if (options_.guard_page && ::mprotect(slot, page_, PROT_NONE) != 0) {
      throw Error("cannot protect a fiber stack guard page (" + std::string(std::strerror(errno)) + ") after " +
                  std::to_string(in_use_) +
                  " stacks: each guard page costs a memory mapping and vm.max_map_count limits "
                  "them; turn guard pages off (StackOptions::guard_page, or a release build) or "
                  "raise vm.max_map_count");
    }
    free_tops_.push_back(slot + slot_bytes_);
  }
  // Every fiber touches the top page of its stack when it starts (boost::context puts the fiber
  // record there). Faulting those pages in here, one madvise per stack, costs about a fifth less
  // kernel time than a page fault per fiber; kernels without MADV_POPULATE_WRITE (before 5.14)
  // refuse it and the pages fault in as usual.
#ifdef MADV_POPULATE_WRITE
  for (size_t i = 0; i < slots_per_slab_; ++i) ::madvise(p + (i + 1) * slot_bytes_ - page_, page_, MADV_POPULATE_WRITE);
#endif
}

boost::context::stack_context StackPool::allocate() {
  if (free_tops_.empty()) grow();
  boost::context::stack_context sctx;
  sctx.sp = free_tops_.back();
  sctx.size = stack_bytes_;
  free_tops_.pop_back();
  RANKSIM_UNPOISON(static_cast<char*>(sctx.sp) - sctx.size, sctx.size);
  if (options_.measure) std::memset(static_cast<char*>(sctx.sp) - sctx.size, kPaint, sctx.size);
  ++in_use_;
  return sctx;
}

void StackPool::deallocate(boost::context::stack_context& sctx) noexcept {
  if (options_.measure) {
    // Stacks grow down: the lowest byte no longer holding the paint marks the deepest frame.
    const auto* bottom = static_cast<const unsigned char*>(sctx.sp) - sctx.size;
    size_t untouched = 0;
    while (untouched < sctx.size && bottom[untouched] == kPaint) ++untouched;
    high_water_ = std::max(high_water_, sctx.size - untouched);
  }
  free_tops_.push_back(static_cast<char*>(sctx.sp));
  --in_use_;
}

namespace {
// The allocator handed to boost::context: a handle on the pool, copied into the fiber record.
struct PoolAllocator {
  StackPool* pool;
  const void** bottom_out;  // where the new stack's lowest address is reported (for ASan)
  boost::context::stack_context allocate() {
    boost::context::stack_context sctx = pool->allocate();
    *bottom_out = static_cast<char*>(sctx.sp) - sctx.size;
    return sctx;
  }
  void deallocate(boost::context::stack_context& sctx) noexcept { pool->deallocate(sctx); }
};
}  // namespace

Fiber::Fiber(StackPool& pool, std::function<void()> body) : body_(std::move(body)) {
  stack_size_ = pool.stack_size();
  context_ = boost::context::fiber(std::allocator_arg, PoolAllocator{&pool, &stack_bottom_},
                                   [this](boost::context::fiber&& caller) {
                                     caller_ = std::move(caller);
                                     RANKSIM_FINISH_SWITCH(nullptr, &caller_bottom_, &caller_size_);
                                     body_();
                                     finished_ = true;
                                     // nullptr: this stack is done, so AddressSanitizer may drop its fake frames.
                                     RANKSIM_START_SWITCH(nullptr, caller_bottom_, caller_size_);
                                     return std::move(caller_);
                                   });
}

Fiber::~Fiber() {
  // A suspended fiber would be unwound by boost::context with forced_unwind; the Engine never
  // leaves one behind (it unwinds ranks itself so that rank code sees an ordinary exception).
  RANKSIM_CHECK(!started_ || finished_, "destroying a suspended fiber");
}

void Fiber::resume() {
  RANKSIM_CHECK(!finished_, "resuming a finished fiber");
  started_ = true;
  void* driver_fake = nullptr;
  RANKSIM_START_SWITCH(&driver_fake, stack_bottom_, stack_size_);
  context_ = std::move(context_).resume();
  RANKSIM_FINISH_SWITCH(driver_fake, nullptr, nullptr);
}

void Fiber::suspend() {
  RANKSIM_START_SWITCH(&fake_stack_, caller_bottom_, caller_size_);
  caller_ = std::move(caller_).resume();
  RANKSIM_FINISH_SWITCH(fake_stack_, &caller_bottom_, &caller_size_);
}

}  // namespace ranksim::sim
