//! Integration tests of the aws provider. The `moto_*` modules talk to the moto emulator started by
//! `./scripts/test.sh` (see `harness`).

mod harness;
mod moto_amis;
mod moto_network;
