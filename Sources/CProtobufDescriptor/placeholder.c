#include "CProtobufDescriptor.h"
