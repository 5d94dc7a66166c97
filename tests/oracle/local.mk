# tests/oracle/local.mk - sources and tests of this module (included by Makefile.am)
