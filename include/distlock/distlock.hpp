// The whole of distlock in one include.
#pragma once

#include "distlock/client.hpp"
#include "distlock/connection.hpp"
#include "distlock/error.hpp"
#include "distlock/reply.hpp"
#include "distlock/scripts.hpp"
#include "distlock/token.hpp"
#include "distlock/version.hpp"
