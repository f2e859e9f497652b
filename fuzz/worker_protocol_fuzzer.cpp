// libFuzzer target for what a worker and a worker host parse themselves (built with
// clang++ by fuzz/CMakeLists.txt): every frame body of the worker protocol
// (runtime/frames.h: what a worker host reads from its socket and rings, what the main
// process reads back), the encoded value a remote session decodes its configuration from
// with the check of its dataset handle (remote_protocol.h: remote_resource_error),
// host:port parsing, the greeting a worker host's bulk port reads (parse_bulk_hello) and
// the RemoteReply head and batch skeleton the main process reads from a bulk stream.  CAF
// deserializes the network messages themselves.  The only
// acceptable failure is a loader::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "loader/error.h"
#include "loader/runtime/batch_codec.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/remote_protocol.h"
#include "loader/value.h"

namespace {
template <class F>
void guarded(F f) {
  try {
    f();
  } catch (const loader::Error&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loader::runtime;
  const std::string body(reinterpret_cast<const char*>(data), size);
  guarded([&] {
    const TaskFrame t = TaskFrame::decode(body);
    if (TaskFrame::decode(t.encode()).indices != t.indices) __builtin_trap();  // round trip
  });
  guarded([&] { UseSlabFrame::decode(body); });
  guarded([&] { AddSlabFrame::decode(body); });
  guarded([&] { DropSlabFrame::decode(body); });
  guarded([&] { StatePageFrame::decode(body); });
  guarded([&] { RingsFrame::decode(body); });
  guarded([&] { SetRngFrame::decode(body); });
  guarded([&] { TaskSeedsFrame::decode(body); });
  guarded([&] { decode_stream_resume(body); });
  guarded([&] { PidFrame::decode(body); });
  guarded([&] { InitErrorFrame::decode(body); });
  guarded([&] { decode_stream_start(body); });
  for (FrameType t : {FrameType::Result, FrameType::Need, FrameType::TaskError, FrameType::IterEnd, FrameType::Task})
    guarded([&] { decode_reply(static_cast<uint8_t>(t), body); });
  guarded([&] {
    const loader::Value v = loader::decode_value(body);
    (void)remote_resource_error(v);
  });
  guarded([&] { parse_host_port(body, "fuzz"); });
  if (auto key = parse_bulk_hello(body.data(), body.size()))
    if (bulk_hello(*key) != body) __builtin_trap();  // a greeting it takes is one it would send
  guarded([&] { RemoteReplyFrame::decode_head(body, nullptr, nullptr); });
  // A skeleton allocates only what the data after it holds: here the input's size.
  guarded([&] { unfilled_batch(body, size); });
  return 0;
}
