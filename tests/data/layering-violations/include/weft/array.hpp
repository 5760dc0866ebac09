// an array public header including a runtime one
#pragma once
#include "weft/session.hpp"
