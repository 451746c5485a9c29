#include "CSubstatusProto.h"
