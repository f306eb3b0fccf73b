//! A request's pieces that every transport shares, without I/O: its life
//! ([`lifecycle`]), where its data is ([`data`]), what it asks of its
//! namespace ([`plan`]), the data-buffer pool's bookkeeping ([`pool`]), the
//! QoS token buckets it may wait for ([`qos`]) and the write gate a write
//! passes ([`write_gate`]).

pub mod data;
pub mod lifecycle;
pub mod plan;
pub mod pool;
pub mod qos;
pub mod write_gate;
