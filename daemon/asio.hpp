#pragma once
// The one place the daemon includes Boost.Asio. Boost 1.74's awaitable.hpp uses std::exchange
// without including <utility>, which GCC 12's headers no longer pull in indirectly.
#include <utility>

#include <boost/asio.hpp>

namespace jitterd {
namespace asio = boost::asio;
}  // namespace jitterd
