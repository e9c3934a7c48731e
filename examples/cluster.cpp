// The Redis Cluster guide's example (docs/cluster.md), as a program that
// runs: the part between the "docs cluster" markers is the guide's code
// block, character for character (a test compares them).
//
//   cluster redis://host1:port1,host2:port2
#include <cstdio>

// [docs cluster]
#include <distlock/distlock.hpp>
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  // A few seed nodes are enough: the client reads the slot map from them.
  auto where = distlock::ClusterOptions::from_uri(argc > 1 ? argv[1] : "redis://127.0.0.1:7000");
  where.command_timeout = 500ms;  // every ClientOptions field applies to each node's pool
  distlock::ClusterClient cluster{where};

  // The same lock types, over the cluster: only the backend's construction changed.
  distlock::Mutex stock{cluster, "stock:{42}", distlock::LockOptions{}.ttl(5s).fencing(true)};
  if (std::unique_lock lock{stock, 2s}) {
    std::printf("stock:{42} held with fence %lld\n", stock.fence());
  }

  // Each name lives on the master that owns its hash slot; renewals, releases
  // and waits follow it there, through MOVED and ASK while slots move.
  distlock::ReentrantMutex tree{cluster, "menu-tree"};
  distlock::SharedMutex catalog{cluster, "catalog"};
  {
    std::lock_guard hold{tree};
    std::shared_lock read{catalog};
  }
}
// [docs cluster end]
