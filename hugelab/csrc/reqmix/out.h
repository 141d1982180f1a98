#ifndef REQMIX_OUT_H
#define REQMIX_OUT_H

#include <stdio.h>

#include "run.h"

#define RM_OUT_VERSION 1

void rm_report(rm_run *r, FILE *f);

#endif
