//! RDMA transport.
