#include "loader/runtime/frames.h"

#include <cstring>
#include <tuple>

#include "loader/error.h"
#include "loader/generator.h"
#include "loader/runtime/batch_codec.h"

namespace loader::runtime {

namespace {
/// Runs `read` over a body; whatever it cannot read (or leaves unread) is a
/// RuntimeError naming the frame.
template <class Read>
auto decoding(FrameType type, const std::string& body, Read read) {
  Reader in(body);
  try {
    auto out = read(in);
    if (in.remaining() != 0)
      throw RuntimeError(std::to_string(in.remaining()) + " bytes after the end of its body");
    return out;
  } catch (const std::exception& e) {
    throw RuntimeError(std::string(frame_type_name(type)) + " frame of " + std::to_string(body.size()) +
                       " bytes cannot be read: " + e.what());
  }
}
}  // namespace

// ---------------------------------------------------------------- main process -> worker

std::string TaskFrame::encode(uint64_t task, uint64_t slab, const IndexBatch& indices) {
  std::string b;
  b.reserve(24 + indices.size() * sizeof(int64_t));
  put_u64(b, task);
  put_u64(b, slab);
  put_u64(b, indices.size());
  // The indices as put_u64 would write them, one by one (host order), in one append.
  b.append(reinterpret_cast<const char*>(indices.data()), indices.size() * sizeof(int64_t));
  return b;
}

std::string TaskFrame::encode() const { return encode(task, slab, indices); }

TaskFrame TaskFrame::decode(const std::string& body) {
  return decoding(kType, body, [](Reader& in) {
    TaskFrame t;
    t.task = in.u64();
    t.slab = in.u64();
    const uint64_t n = in.u64();
    if (n != in.remaining() / sizeof(int64_t) || in.remaining() % sizeof(int64_t) != 0)
      throw RuntimeError("a count of " + std::to_string(n) + " indices against " + std::to_string(in.remaining()) +
                         " bytes of them");
    t.indices.resize(n);
    if (n) std::memcpy(t.indices.data(), in.pos(), n * sizeof(int64_t));
    in.rest();
    return t;
  });
}

std::string UseSlabFrame::encode() const {
  std::string b;
  put_u64(b, task);
  put_u64(b, slab);
  return b;
}

UseSlabFrame UseSlabFrame::decode(const std::string& body) {
  return decoding(kType, body, [](Reader& in) {
    UseSlabFrame f;
    f.task = in.u64();
    f.slab = in.u64();
    return f;
  });
}

std::string AddSlabFrame::encode() const {
  std::string b;
  put_u64(b, id);
  put_u64(b, size);
  return b;
}

AddSlabFrame AddSlabFrame::decode(const std::string& body) {
  return decoding(kType, body, [](Reader& in) {
    AddSlabFrame f;
    f.id = in.u64();
    f.size = in.u64();
    if (f.size == 0) throw RuntimeError("an empty slab");
    return f;
  });
}

std::string DropSlabFrame::encode() const {
  std::string b;
  put_u64(b, id);
  return b;
}

DropSlabFrame DropSlabFrame::decode(const std::string& body) {
  return decoding(kType, body, [](Reader& in) { return DropSlabFrame{in.u64()}; });
}

std::string StatePageFrame::encode() const {
  std::string b;
  put_u64(b, size);
  return b;
}

StatePageFrame StatePageFrame::decode(const std::string& body) {
  return decoding(kType, body, [](Reader& in) { return StatePageFrame{in.u64()}; });
}

std::string RingsFrame::encode() const {
  std::string b;
  put_u64(b, capacity);
  put_u64(b, workers);
  put_u64(b, index);
  put_u64(b, generation);
  return b;
}

RingsFrame RingsFrame::decode(const std::string& body) {
  return decoding(kType, body, [](Reader& in) {
    RingsFrame f;
    f.capacity = in.u64();
    f.workers = in.u64();
    f.index = in.u64();
    f.generation = in.u64();
    if (f.workers == 0 || f.workers > (1u << 16) || f.index >= f.workers || f.capacity < 4096 ||
        f.capacity > (uint64_t{1} << 30) || f.generation > UINT32_MAX)
      throw RuntimeError("rings of " + std::to_string(f.workers) + " workers, index " + std::to_string(f.index) +
                         ", capacity " + std::to_string(f.capacity));
    return f;
  });
}

std::string SetRngFrame::encode() const {
  std::string b;
  put_u64(b, task);
  b.append(state);
  return b;
}

SetRngFrame SetRngFrame::decode(const std::string& body) {
  return decoding(kType, body, [](Reader& in) {
    SetRngFrame f;
    f.task = in.u64();
    if (in.remaining() != Generator::kStateBytes)
      throw RuntimeError("a generator state of " + std::to_string(in.remaining()) + " bytes instead of " +
                         std::to_string(Generator::kStateBytes));
    f.state = in.rest();
    return f;
  });
}

std::string TaskSeedsFrame::encode() const {
  std::string b;
  put_u64(b, base_seed);
  put_u64(b, task_base);
  return b;
}

TaskSeedsFrame TaskSeedsFrame::decode(const std::string& body) {
  return decoding(kType, body, [](Reader& in) {
    TaskSeedsFrame f;
    f.base_seed = in.u64();
    f.task_base = in.u64();
    return f;
  });
}

std::string encode_stream_resume(const StreamResume& resume) {
  std::string body;
  put_u64(body, resume.skip);
  put_string(body, resume.rng);
  put_string(body, resume.state);
  return body;
}

StreamResume decode_stream_resume(const std::string& body) {
  return decoding(FrameType::ResumeStream, body, [](Reader& in) {
    StreamResume r;
    r.skip = in.u64();
    r.rng = in.string();
    r.state = in.string();
    return r;
  });
}

// ---------------------------------------------------------------- worker -> main process

std::string PidFrame::encode() const {
  std::string b;
  put_u64(b, static_cast<uint64_t>(pid));
  return b;
}

PidFrame PidFrame::decode(const std::string& body) {
  return decoding(FrameType::Hello, body, [](Reader& in) { return PidFrame{static_cast<int64_t>(in.u64())}; });
}

std::string InitErrorFrame::encode() const {
  std::string b;
  put_string(b, type);
  put_string(b, message);
  if (!when.empty()) put_string(b, when);
  return b;
}

InitErrorFrame InitErrorFrame::decode(const std::string& body) {
  return decoding(kType, body, [](Reader& in) {
    InitErrorFrame f;
    f.type = in.string();
    f.message = in.string();
    if (in.remaining()) f.when = in.string();
    return f;
  });
}

namespace {
/// A reply's frame type and body; a Result's batch at the body's end only `with_batch`
/// (a RemoteReply sends it after its head, split: RemoteReplyFrame::encode).
std::pair<uint8_t, std::string> encode_reply_body(const WorkerReply& r, bool with_batch) {
  std::string body;
  put_u64(body, r.task);
  switch (r.kind) {
    case WorkerReply::Kind::Result:
      put_u64(body, r.slab);
      put_u64(body, r.bytes);
      put_u64(body, r.busy_ns);
      put_u64(body, r.collate_ns);
      if (with_batch && r.value) encode_value(*r.value, body);  // an inline batch, encoded once, here
      else if (with_batch) body += r.payload;
      return {static_cast<uint8_t>(FrameType::Result), body};
    case WorkerReply::Kind::Need:
      put_u64(body, r.bytes);
      return {static_cast<uint8_t>(FrameType::Need), body};
    case WorkerReply::Kind::Error:
      put_string(body, r.error_type);
      put_string(body, r.error_message);
      put_u64(body, r.busy_ns);
      put_u64(body, r.collate_ns);
      return {static_cast<uint8_t>(FrameType::TaskError), body};
    case WorkerReply::Kind::IterEnd: return {static_cast<uint8_t>(FrameType::IterEnd), body};
  }
  return {0, body};
}
}  // namespace

std::pair<uint8_t, std::string> encode_reply(const WorkerReply& r) { return encode_reply_body(r, true); }

void encode_inline_batch(WorkerReply& r) {
  if (!r.value) return;
  r.payload.clear();
  encode_value(*r.value, r.payload);
  r.value.reset();
}

bool is_reply(FrameType type) {
  return type == FrameType::Result || type == FrameType::Need || type == FrameType::TaskError ||
         type == FrameType::IterEnd;
}

WorkerReply decode_reply(uint8_t type, const std::string& body) {
  const auto t = static_cast<FrameType>(type);
  if (!is_reply(t)) throw RuntimeError(std::string("unexpected reply frame ") + frame_type_name(t));
  return decoding(t, body, [t](Reader& in) {
    WorkerReply r;
    r.task = in.u64();
    switch (t) {
      case FrameType::Result:
        r.kind = WorkerReply::Kind::Result;
        r.slab = in.u64();
        r.bytes = in.u64();
        r.busy_ns = in.u64();
        r.collate_ns = in.u64();
        r.payload = in.rest();
        break;
      case FrameType::Need:
        r.kind = WorkerReply::Kind::Need;
        r.bytes = in.u64();
        break;
      case FrameType::TaskError:
        r.kind = WorkerReply::Kind::Error;
        r.error_type = in.string();
        r.error_message = in.string();
        r.busy_ns = in.u64();
        r.collate_ns = in.u64();
        break;
      default: r.kind = WorkerReply::Kind::IterEnd; break;
    }
    return r;
  });
}

std::string encode_stream_start(uint64_t task, const StreamStart& start) {
  std::string body;
  put_u64(body, task);
  put_string(body, start.rng);
  put_u64(body, start.state ? 1 : 0);
  put_string(body, start.state.value_or(std::string()));
  return body;
}

std::pair<uint64_t, StreamStart> decode_stream_start(const std::string& body) {
  return decoding(FrameType::StreamStart, body, [](Reader& in) {
    const uint64_t task = in.u64();
    StreamStart start;
    start.rng = in.string();
    const bool has_state = in.u64() != 0;
    std::string state = in.string();
    if (has_state) start.state = std::move(state);
    return std::pair<uint64_t, StreamStart>(task, std::move(start));
  });
}

RemoteReplyFrame RemoteReplyFrame::encode(const WorkerReply& r, const std::string& before, const std::string& after) {
  auto [type, body] = encode_reply_body(r, false);  // the batch goes out after the head
  std::string head;
  put_string(head, before);
  put_string(head, after);
  put_u64(head, type);
  head += body;
  RemoteReplyFrame f;
  put_string(f.front, head);
  if (r.kind != WorkerReply::Kind::Result) return f;
  SplitBatch split = split_batch(r.value ? *r.value : decode_value(r.payload));
  put_string(f.front, split.skeleton);
  f.tensors = std::move(split.tensors);
  return f;
}

WorkerReply RemoteReplyFrame::decode_head(const std::string& head, std::string* before, std::string* after) {
  auto [b, a, type, body] = decoding(kType, head, [](Reader& in) {
    std::string states[2];
    states[0] = in.string();
    states[1] = in.string();
    const uint64_t t = in.u64();
    if (t > 255) throw RuntimeError("reply frame type " + std::to_string(t));
    return std::make_tuple(std::move(states[0]), std::move(states[1]), static_cast<uint8_t>(t), in.rest());
  });
  WorkerReply r = decode_reply(type, body);
  if (r.kind == WorkerReply::Kind::Result && !r.payload.empty())
    throw RuntimeError("a RemoteReply frame whose head holds " + std::to_string(r.payload.size()) +
                       " bytes of a batch");
  if (before) *before = std::move(b);
  if (after) *after = std::move(a);
  return r;
}

ReadStatus RemoteReplyFrame::read(int sock, uint64_t body, WorkerReply& out, std::string* before, std::string* after,
                                  TensorAllocator* alloc) {
  // One length-prefixed part of what is left of the body.
  uint64_t left = body;
  std::string part;
  auto read_part = [&](const char* what) {
    uint64_t n = 0;
    if (left < 8)
      throw RuntimeError(std::string("a RemoteReply frame of ") + std::to_string(body) + " bytes ends before its " +
                         what);
    if (ReadStatus st = read_bytes(sock, reinterpret_cast<char*>(&n), 8); st != ReadStatus::Ok) return st;
    left -= 8;
    if (n > left)
      throw RuntimeError(std::string("a RemoteReply frame of ") + std::to_string(body) + " bytes with a " + what +
                         " of " + std::to_string(n));
    part.assign(n, '\0');
    left -= n;
    return read_bytes(sock, part.data(), n);
  };
  if (ReadStatus st = read_part("head"); st != ReadStatus::Ok) return st;
  out = decode_head(part, before, after);
  if (out.kind != WorkerReply::Kind::Result) {
    if (left)
      throw RuntimeError("a RemoteReply frame with " + std::to_string(left) +
                         " bytes after a reply that has no batch");
    return ReadStatus::Ok;
  }
  if (ReadStatus st = read_part("batch skeleton"); st != ReadStatus::Ok) return st;
  UnfilledBatch batch;
  try {
    batch = unfilled_batch(part, left, alloc);
  } catch (const std::exception& e) {
    throw RuntimeError(std::string("a RemoteReply frame's batch cannot be read: ") + e.what());
  }
  for (const Tensor& t : batch.tensors) {
    if (!t.nbytes()) continue;
    if (ReadStatus st = read_bytes(sock, static_cast<char*>(t.data_ptr()), t.nbytes()); st != ReadStatus::Ok)
      return st;
  }
  out.value = std::make_shared<Value>(std::move(batch.batch));
  return ReadStatus::Ok;
}

ReadStatus read_bulk_frame(int sock, BulkFrame& out, TensorAllocator* alloc) {
  char header[kFrameHeaderBytes];
  if (ReadStatus st = read_bytes(sock, header, kFrameHeaderBytes); st != ReadStatus::Ok) return st;
  const FrameHeader h = parse_frame_header(header);
  out.type = h.type;
  switch (h.type) {
    case FrameType::RemoteReply:
      return RemoteReplyFrame::read(sock, h.body, out.reply, &out.before, &out.after, alloc);
    case FrameType::Ready:
    case FrameType::StreamStart:
    case FrameType::InitError:
      out.body.assign(static_cast<size_t>(h.body), '\0');
      return read_bytes(sock, out.body.data(), out.body.size());
    default:
      throw RuntimeError(std::string("an unexpected ") + frame_type_name(h.type) + " frame on a bulk stream");
  }
}

}  // namespace loader::runtime
