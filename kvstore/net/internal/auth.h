// Authentication of a kvstore connection (DESIGN.md §4): challenge-response over the cluster token with
// HMAC-SHA256 (OpenSSL's libcrypto). The token never crosses the wire.
//
// Both sides of a new connection send an AuthChallenge with a fresh random nonce. Each answers the other's
// with an AuthProof: HMAC(token, label || side || 0 || peer nonce || own nonce), `side` naming the sender's
// end of the TCP connection ("connect" or "accept"), so a proof cannot be reflected back to its maker or
// replayed on another connection (the nonces are new each time). A side reads nothing else from its peer
// until it has checked the peer's proof (VerifyAuthProof, a constant-time comparison).
//
// An empty token is the insecure mode: the same exchange with an empty key, which any peer without a token
// passes and any peer with one fails.
//
// Thread-safety: the functions are thread-safe. Internal to kvstore/.
#pragma once

#include <string>

namespace troupe::net {

// `n` bytes from OpenSSL's CSPRNG; throws troupe::Error when it fails.
std::string RandomBytes(std::size_t n);
// The proof the `connect_side` (or accepting) end sends for the peer's challenge.
std::string AuthProofFor(const std::string& token, bool connect_side, const std::string& peer_nonce,
                         const std::string& own_nonce);
// Whether `mac` is the proof the peer (on the other side of the connection) owes for `own_nonce`.
bool VerifyAuthProof(const std::string& token, bool my_connect_side, const std::string& own_nonce,
                     const std::string& peer_nonce, const std::string& mac);

}  // namespace troupe::net
