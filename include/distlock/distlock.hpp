// The whole of distlock in one include.
#pragma once

#include "distlock/acquire_policy.hpp"
#include "distlock/client.hpp"
#include "distlock/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/mutex.hpp"
#include "distlock/notifier.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/reply.hpp"
#include "distlock/scripts.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "distlock/token.hpp"
#include "distlock/version.hpp"
#include "distlock/watchdog.hpp"
