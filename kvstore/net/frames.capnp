# The wire format of the distributed KVStore (DESIGN.md §4): every message between scheduler,
# servers and workers is one Frame. On a TCP connection a frame is an 8-byte little-endian length (the
# number of bytes of the Cap'n Proto flat message that follows) and then the message itself (segment table
# and segments, as capnp::writeMessage writes them). kvstore/net/src/frame_codec.cc is the only code that
# reads or writes these types; everything else uses the plain structs of kvstore/net/internal/frame_codec.h.
#
# Compatibility: a node accepts only frames whose `version` equals its own kProtocolVersion. Fields may be
# added at the end of a struct (new ordinals) without a version bump if old readers can ignore them; any
# change in meaning bumps the version.

@0xb7c1d2e3f4a50617;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("troupe::net::wire");

# The role of a node in the cluster (ps-lite's roles).
enum Role {
  scheduler @0;  # Membership, rank assignment, barriers, heartbeats.
  server @1;     # Owns key ranges, sums pushes, runs the optimizer.
  worker @2;     # Computes gradients, pushes and pulls.
  observer @3;   # Looks into a running cluster (troupe shell --connect): asks the scheduler for the node
                 # table and servers for their keys, values and counters; takes no part in rounds or
                 # barriers, sends no heartbeats, is not counted as a node. Protocol version 2.
}

# Authentication (protocol version 3): the first frame on every connection, in both directions, is an
# AuthChallenge; each side answers the other's with an AuthProof. Until a side has checked the other's
# proof it reads nothing else (error frames aside) and nothing bigger than 4 KiB. The cluster token itself
# never crosses the wire.
struct AuthChallenge {
  nonce @0 :Data;  # 32 random bytes, new for every connection.
}
struct AuthProof {
  # HMAC-SHA256 keyed with the cluster token over
  #   "troupe-auth-v3 " + ("connect" | "accept") + 0x00 + the peer's nonce + the sender's own nonce,
  # where the word names the sender's side of the TCP connection (so a proof cannot be reflected back).
  mac @0 :Data;    # 32 bytes.
}

# First frame of a role on every connection (after authentication), in both directions.
struct Hello {
  role @0 :Role;              # The sender's role.
  rank @1 :Int32 = -1;        # The sender's rank within its role; -1 = not assigned yet (the scheduler assigns).
  protocolVersion @2 :UInt32; # The sender's kProtocolVersion; must equal Frame.version and the receiver's.
  clusterToken @3 :Text;      # Unused since protocol version 3 (the token never crosses the wire: the
                              # connection authenticates first, AuthChallenge/AuthProof); always empty.
  host @4 :Text;              # Address other nodes reach the sender at (DMLC_NODE_HOST or the interface's IP).
  port @5 :UInt16;            # TCP port the sender listens on (0 = it accepts no connections, e.g. a worker).
}

# A dense tensor: the element type, the dimensions and the raw bytes in row-major order.
struct Tensor {
  dtype @0 :UInt8;        # A troupe::DType value (tensor/tensor.h): 0 float32, 1 float64, 2 float16, ...
  shape @1 :List(Int64);  # Dimensions, outermost first, each >= 0; an empty list is a scalar (1 element).
  data @2 :Data;          # The element bytes (host byte order = little endian): product(shape) * size(dtype)
                          # bytes, or, when the request says `compressed`, the 2-bit payload:
                          # ceil(product(shape) / 16) * 4 bytes (kvstore/gradient_compression.h).
}

# init, push, pull and pushPull: one key (or one part of a big key) from a worker to the server owning it.
struct TensorRequest {
  requestId @0 :UInt64;         # Chosen by the sender, unique per connection; the ack/error echoes it.
  key @1 :Int32;                # The integer key (string keys are mapped to ints by the worker first).
  partIndex @2 :UInt32;         # Which part of a big array split across servers, 0 <= partIndex < partCount.
  partCount @3 :UInt32 = 1;     # Number of parts the array was split into; 1 = not split.
  value @4 :Tensor;             # init/push/pushPull: the value or gradient of this part. pull: dtype and shape
                                # the worker expects (shape may be empty = "whatever is stored"), no data.
  priority @5 :Int32;           # Scheduling priority as in KVStore::Push (higher first); a hint.
  compressed @6 :Bool;          # value.data is 2-bit compressed (push/pushPull only); value.dtype is float32
                                # and value.shape is the shape of the uncompressed gradient.
  compressionThreshold @7 :Float32;  # The 2-bit threshold (a gradient value, > 0) when compressed.
  round @8 :UInt64;             # push/pushPull: this worker's push number of this key (1, 2, ...), so that a
                                # server restarted from a checkpoint applies a resent push once and drops a
                                # duplicate; 0 = unnumbered (init, pull).
}

# Synchronise a group of nodes; the scheduler answers with an ack when all of the group arrived.
struct Barrier {
  requestId @0 :UInt64;  # Echoed by the ack.
  group @1 :UInt8;       # Bit mask of the roles taking part: 1 scheduler, 2 servers, 4 workers (ps-lite).
}

# Liveness; sent every heartbeat interval to the scheduler (and by the scheduler to every node).
struct Heartbeat {
  senderRank @0 :Int32;  # The sender's rank within its role (-1 for the scheduler).
  sequence @1 :UInt64;   # Increases by one per heartbeat from this sender; gaps show lost beats.
}

# One argument of a command.
struct KeyValue {
  key @0 :Text;
  value @1 :Text;
}

# A named control operation with text arguments, e.g. "checkpoint" {"dir": "/path"}, "leave", "stop",
# "set_optimizer" {"type": "sgd", "lr": "0.1"}. Never code: the receiver maps the name to a fixed action.
struct Command {
  requestId @0 :UInt64;      # Echoed by the ack or error.
  name @1 :Text;             # The operation.
  args @2 :List(KeyValue);   # Its arguments, in order; keys need not be unique.
}

# Success of the request `requestId`; a pull or pushPull answers with the value.
struct Ack {
  requestId @0 :UInt64;  # The request answered.
  union {
    done @1 :Void;       # No result (init, push, barrier, command).
    value @2 :Tensor;    # The pulled value (pull, pushPull).
  }
}

# Failure of the request `requestId` (0 = not about one request, e.g. a refused hello).
struct Error {
  requestId @0 :UInt64;       # The request that failed, or 0.
  message @1 :Text;           # What failed and, where there is one, the fix (DESIGN.md §5).
  deadNodeRank @2 :Int32 = -1;  # The rank of the node whose death caused the failure; -1 = none.
  deadNodeRole @3 :Role;      # Its role (meaningful when deadNodeRank >= 0).
}

# Protocol version 4: several tensor requests of one worker to one server in one frame (a training step's
# small keys), answered each by its own Ack or Error; the answers that a server has ready at the same time for
# one connection travel together in one ReplyBatch. The receiver handles the entries in order, exactly as if
# each had come in a frame of its own.
struct BatchEntry {
  union {
    init @0 :TensorRequest;
    push @1 :TensorRequest;
    pull @2 :TensorRequest;
    pushPull @3 :TensorRequest;
  }
}
struct TensorBatch {
  entries @0 :List(BatchEntry);  # At least two; in the order the sender wants them handled.
}
struct ReplyBatch {
  acks @0 :List(Ack);      # Answers in the order they were given.
  errors @1 :List(Error);  # Failures (each of its own request); the acks and the errors answer distinct requests.
}

struct Frame {
  version @0 :UInt32;  # The sender's protocol version; frames of another version are refused.
  union {
    hello @1 :Hello;
    init @2 :TensorRequest;
    push @3 :TensorRequest;
    pull @4 :TensorRequest;
    pushPull @5 :TensorRequest;
    barrier @6 :Barrier;
    heartbeat @7 :Heartbeat;
    command @8 :Command;
    ack @9 :Ack;
    error @10 :Error;
    authChallenge @11 :AuthChallenge;
    authProof @12 :AuthProof;
    tensorBatch @13 :TensorBatch;  # Protocol version 4.
    replyBatch @14 :ReplyBatch;    # Protocol version 4.
  }
}
