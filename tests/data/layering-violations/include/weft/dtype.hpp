// a core public header including an array one
#pragma once
#include "weft/array.hpp"
