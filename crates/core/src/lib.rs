//! The sans-IO engine of ustack: interface, ARP, IPv4, ICMP, UDP and TCP.
//!
//! The engine never reads a clock, a random source or a file descriptor:
//! time comes in as an argument and randomness from a seeded source.
#![forbid(unsafe_code)]

pub mod time;
pub mod tcp;
