pub mod uring {}
