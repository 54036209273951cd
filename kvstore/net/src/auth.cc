// Connection authentication: see kvstore/net/internal/auth.h.
#include "kvstore/net/internal/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "base/error.h"
#include "kvstore/dist.h"
#include "kvstore/net/internal/frame_codec.h"

namespace troupe::net {

std::string RandomBytes(std::size_t n) {
  std::string out(n, '\0');
  if (n > 0 && RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    throw Error("kvstore: the system's random number generator failed (OpenSSL RAND_bytes)");
  }
  return out;
}

std::string AuthProofFor(const std::string& token, bool connect_side, const std::string& peer_nonce,
                         const std::string& own_nonce) {
  std::string input = "troupe-auth-v3 ";
  input += connect_side ? "connect" : "accept";
  input.push_back('\0');
  input += peer_nonce;
  input += own_nonce;
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // HMAC with an empty key is defined (the insecure mode); OpenSSL wants a non-null pointer for it.
  static const unsigned char kEmpty = 0;
  const void* key = token.empty() ? static_cast<const void*>(&kEmpty) : static_cast<const void*>(token.data());
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()), reinterpret_cast<const unsigned char*>(input.data()),
           input.size(), mac, &len) == nullptr ||
      len != kAuthMacBytes) {
    throw Error("kvstore: HMAC-SHA256 failed (OpenSSL)");
  }
  return std::string(reinterpret_cast<const char*>(mac), len);
}

bool VerifyAuthProof(const std::string& token, bool my_connect_side, const std::string& own_nonce,
                     const std::string& peer_nonce, const std::string& mac) {
  const std::string want = AuthProofFor(token, !my_connect_side, own_nonce, peer_nonce);
  return mac.size() == want.size() && CRYPTO_memcmp(mac.data(), want.data(), want.size()) == 0;
}

}  // namespace troupe::net

namespace troupe {

std::string NewClusterToken() {
  static const char kHex[] = "0123456789abcdef";
  const std::string raw = net::RandomBytes(32);  // 256 bits
  std::string hex;
  for (unsigned char c : raw) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return hex;
}

}  // namespace troupe
