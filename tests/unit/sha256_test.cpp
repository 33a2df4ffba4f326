// SHA-256 against FIPS 180-4 / NIST example vectors and the coreutils sha256sum of a generated
// text.
#include <gtest/gtest.h>

#include <string>

#include "shaper/sha256.hpp"

using shaper::Sha256;
using shaper::sha256_hex;

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, StreamingInOddChunksEqualsOneShot) {
  std::string text;
  for (int i = 0; i < 10000; ++i) text += std::to_string(i * 7919) + '\n';
  Sha256 streamed;
  for (std::size_t pos = 0, step = 1; pos < text.size(); pos += step, step = step % 97 + 13) {
    streamed.update(std::string_view(text).substr(pos, step));
  }
  EXPECT_EQ(streamed.finish_hex(), sha256_hex(text));
}
