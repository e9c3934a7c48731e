// A program that uses distlock the way a downstream project would, built by
// both consumer projects to prove that the package can be consumed.
#include <distlock/distlock.hpp>

#include <cstdio>

int main() {
  distlock::ClientOptions options;
  options.port = 1;  // a Client connects lazily: nothing needs to listen here
  distlock::Client client(options);
  std::printf("distlock %d.%d.%d, client id %s\n", DISTLOCK_VERSION_MAJOR, DISTLOCK_VERSION_MINOR,
              DISTLOCK_VERSION_PATCH, client.id().c_str());
  return client.id().size() == 32 ? 0 : 1;
}
