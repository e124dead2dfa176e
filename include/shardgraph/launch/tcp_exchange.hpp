#pragma once
// The bootstrap exchange over TCP: rank 0 hands a small blob (an NCCL unique id: 128 bytes) to
// every other rank, at MASTER_ADDR:MASTER_PORT, the way torchrun's store does. POSIX sockets only.
//
//   rank 0:   tcp_server server(placement.master_port);          // listens at once (port 0: any free)
//             server.serve(blob, placement.world_size, timeout); // until every other rank has it
//   others:   std::vector<std::byte> blob = fetch_blob(placement, timeout);
//   or, on every rank:  share_from_rank0(placement, blob_on_rank0, timeout)
//
// Each connecting rank says who it is (rank, world size); rank 0 checks that every rank 1..N-1
// comes exactly once with the same world size, so two runs sharing a port, or ranks started with
// different WORLD_SIZE, fail with a message instead of mixing. Every wait ends at the timeout with
// an error naming the rank, the address and what was missing. (One limit: connect() itself is
// blocking, so a host that drops packets instead of refusing can hold one attempt for the kernel's
// connect timeout before the deadline is seen.)
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shardgraph/core/error.hpp"
#include "shardgraph/launch/placement.hpp"

namespace shardgraph::launch {

namespace detail {

inline constexpr std::uint32_t exchange_magic = 0x53474258;  // "SGBX"

using clock = std::chrono::steady_clock;

inline std::string errno_text() { return std::strerror(errno); }

// An owned socket descriptor.
class socket_fd {
 public:
  socket_fd() = default;
  explicit socket_fd(int fd) : fd_(fd) {}
  socket_fd(socket_fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  socket_fd& operator=(socket_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  ~socket_fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

inline int milliseconds_left(clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits until fd is readable (or writable); false at the deadline.
inline bool wait_for(int fd, short events, clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, milliseconds_left(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Sends or receives exactly `bytes`; the message says what was being moved.
inline void send_all(int fd, const void* data, std::size_t bytes, clock::time_point deadline,
                     const std::string& what) {
  const auto* p = static_cast<const std::byte*>(data);
  while (bytes > 0) {
    if (!wait_for(fd, POLLOUT, deadline))
      fail("launch: tcp exchange", "timed out sending " + what, "check that the peer is alive and reachable");
    const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail("launch: tcp exchange", "sending " + what + " failed: " + errno_text(), "check the peer");
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}
inline void receive_all(int fd, void* data, std::size_t bytes, clock::time_point deadline,
                        const std::string& what) {
  auto* p = static_cast<std::byte*>(data);
  while (bytes > 0) {
    if (!wait_for(fd, POLLIN, deadline))
      fail("launch: tcp exchange", "timed out receiving " + what,
           "check that the peer is alive and reachable");
    const ssize_t n = ::recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0)
      fail("launch: tcp exchange", "the peer closed the connection while sending " + what,
           "see the peer's error");
    if (n < 0)
      fail("launch: tcp exchange", "receiving " + what + " failed: " + errno_text(), "check the peer");
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

struct hello {
  std::uint32_t magic = exchange_magic;
  std::int32_t rank = 0, world_size = 0;
};
struct answer {
  std::uint32_t magic = exchange_magic;
  std::int32_t status = 0;  // 0: the blob follows; else an error text follows
  std::uint64_t bytes = 0;
};

}  // namespace detail

// Rank 0's side: listens on `port` (0: a free port, see port()) on every interface.
class tcp_server {
 public:
  explicit tcp_server(int port) {
    listener_ = detail::socket_fd(::socket(AF_INET, SOCK_STREAM, 0));
    if (listener_.get() < 0)
      fail("launch: tcp exchange", "socket() failed: " + detail::errno_text(), "check the system");
    const int on = 1;
    ::setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      fail("launch: tcp exchange",
           "rank 0 cannot listen on port " + std::to_string(port) + ": " + detail::errno_text(),
           "set MASTER_PORT to a free port (another run may be using this one)");
    if (::listen(listener_.get(), 128) != 0)
      fail("launch: tcp exchange", "listen() failed: " + detail::errno_text(),
           "set MASTER_PORT to a free port");
    socklen_t len = sizeof a;
    ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  int port() const { return port_; }

  // Sends `blob` to ranks 1..world_size-1, each once; returns when all have it.
  void serve(std::span<const std::byte> blob, int world_size, std::chrono::milliseconds timeout) {
    const auto deadline = detail::clock::now() + timeout;
    std::vector<bool> seen(static_cast<std::size_t>(world_size), false);
    for (int served = 1; served < world_size; ++served) {
      if (!detail::wait_for(listener_.get(), POLLIN, deadline)) {
        std::string missing;
        for (int r = 1; r < world_size; ++r)
          if (!seen[static_cast<std::size_t>(r)])
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        fail("launch: tcp exchange",
             "rank 0 waited " + std::to_string(timeout.count()) + " ms on port " + std::to_string(port_) +
                 " and rank(s) " + missing + " never connected",
             "start every rank with the same MASTER_ADDR and MASTER_PORT, or check that they started");
      }
      detail::socket_fd peer(::accept(listener_.get(), nullptr, nullptr));
      if (peer.get() < 0) {
        --served;
        continue;
      }
      detail::hello h;
      detail::receive_all(peer.get(), &h, sizeof h, deadline, "a rank's greeting");
      std::string problem;
      if (h.magic != detail::exchange_magic)
        problem = "a connection that is not a shardgraph rank reached port " + std::to_string(port_);
      else if (h.world_size != world_size)
        problem = "rank " + std::to_string(h.rank) + " has a world of " + std::to_string(h.world_size) +
                  " processes, rank 0 of " + std::to_string(world_size);
      else if (h.rank < 1 || h.rank >= world_size)
        problem = "a rank numbered " + std::to_string(h.rank) + " connected to a world of " +
                  std::to_string(world_size);
      else if (seen[static_cast<std::size_t>(h.rank)])
        problem = "rank " + std::to_string(h.rank) + " connected twice";
      if (!problem.empty()) {
        detail::answer no{detail::exchange_magic, 1, problem.size()};
        if (h.magic == detail::exchange_magic) {
          detail::send_all(peer.get(), &no, sizeof no, deadline, "an error");
          detail::send_all(peer.get(), problem.data(), problem.size(), deadline, "an error");
        }
        fail("launch: tcp exchange", problem,
             "give every process the same WORLD_SIZE and distinct ranks, and one MASTER_PORT per run");
      }
      seen[static_cast<std::size_t>(h.rank)] = true;
      detail::answer yes{detail::exchange_magic, 0, blob.size()};
      detail::send_all(peer.get(), &yes, sizeof yes, deadline,
                       "the blob's header to rank " + std::to_string(h.rank));
      detail::send_all(peer.get(), blob.data(), blob.size(), deadline,
                       "the blob to rank " + std::to_string(h.rank));
    }
  }

 private:
  detail::socket_fd listener_;
  int port_ = 0;
};

// A non-zero rank's side: connects to rank 0 (retrying until it listens) and returns its blob.
inline std::vector<std::byte> fetch_blob(const placement& p, std::chrono::milliseconds timeout) {
  const auto deadline = detail::clock::now() + timeout;
  const std::string where = "launch: tcp exchange (rank " + std::to_string(p.rank) + ")";
  const std::string at = p.master_addr + ":" + std::to_string(p.master_port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int e =
          ::getaddrinfo(p.master_addr.c_str(), std::to_string(p.master_port).c_str(), &hints, &found);
      e != 0)
    fail(where, "cannot resolve MASTER_ADDR '" + p.master_addr + "': " + ::gai_strerror(e),
         "set MASTER_ADDR to rank 0's host name or IP address");
  const sockaddr_in target = *reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  std::string last_error = "no attempt";
  for (;;) {
    detail::socket_fd s(::socket(AF_INET, SOCK_STREAM, 0));
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&target), sizeof target) == 0) {
      detail::hello h{detail::exchange_magic, p.rank, p.world_size};
      detail::send_all(s.get(), &h, sizeof h, deadline, "this rank's greeting to " + at);
      detail::answer a;
      detail::receive_all(s.get(), &a, sizeof a, deadline, "rank 0's answer from " + at);
      if (a.magic != detail::exchange_magic)
        fail(where, "the process at " + at + " is not a shardgraph rank 0",
             "check MASTER_ADDR and MASTER_PORT");
      if (a.bytes > (std::uint64_t{1} << 20))
        fail(where, "rank 0 announced " + std::to_string(a.bytes) + " bytes, more than a bootstrap blob",
             "check MASTER_ADDR and MASTER_PORT");
      std::vector<std::byte> data(static_cast<std::size_t>(a.bytes));
      detail::receive_all(s.get(), data.data(), data.size(), deadline, "the blob from " + at);
      if (a.status != 0)
        fail(where,
             "rank 0 refused this rank: " +
                 std::string(reinterpret_cast<const char*>(data.data()), data.size()),
             "give every process the same WORLD_SIZE and distinct ranks");
      return data;
    }
    last_error = detail::errno_text();
    if (detail::clock::now() >= deadline)
      fail(where,
           "could not reach rank 0 at " + at + " within " + std::to_string(timeout.count()) + " ms (" +
               last_error + ")",
           "start rank 0 too, and give every rank the same MASTER_ADDR and MASTER_PORT");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Every rank: rank 0 serves `blob` (ignored elsewhere); every rank returns rank 0's blob.
inline std::vector<std::byte> share_from_rank0(const placement& p, std::span<const std::byte> blob,
                                               std::chrono::milliseconds timeout) {
  if (p.world_size == 1) return {blob.begin(), blob.end()};
  if (p.rank == 0) {
    tcp_server server(p.master_port);
    server.serve(blob, p.world_size, timeout);
    return {blob.begin(), blob.end()};
  }
  return fetch_blob(p, timeout);
}

}  // namespace shardgraph::launch
