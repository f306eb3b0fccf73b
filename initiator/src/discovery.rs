//! Discovery: read the discovery log page consistently.
//!
//! The log may change while it is read in pieces, so the reader takes the
//! header, then the whole log, then the header again, and retries when the
//! generation counter moved (as nvme-cli does).

use nvme::discovery::{DiscoveryEntry, DiscoveryHeader, ENTRY_SIZE, HEADER_SIZE};
use nvme::opcode::lid;

use crate::controller::{ConnectOptions, Controller};
use crate::error::{Error, Result};

/// Attempts before giving up on a log that keeps changing.
pub const MAX_ATTEMPTS: usize = 10;

/// The discovery log: generation counter and entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryLog {
    /// Generation counter the entries belong to.
    pub genctr: u64,
    /// Entries.
    pub entries: Vec<DiscoveryEntry>,
}

/// Reads the log through `fetch(offset, buf)`, which fills `buf` with the log
/// bytes at `offset`. Sans-IO: the caller supplies the transport.
pub fn read_log(fetch: &mut dyn FnMut(u64, &mut [u8]) -> Result<()>) -> Result<DiscoveryLog> {
    for _ in 0..MAX_ATTEMPTS {
        let mut hdr = vec![0u8; HEADER_SIZE];
        fetch(0, &mut hdr)?;
        let h1 = DiscoveryHeader::parse(&hdr).map_err(|e| Error::Protocol(e.to_string()))?;
        if h1.numrec > 4096 {
            return Err(Error::Protocol(format!(
                "discovery log claims {} records",
                h1.numrec
            )));
        }
        let mut body = vec![0u8; h1.numrec as usize * ENTRY_SIZE];
        if !body.is_empty() {
            fetch(HEADER_SIZE as u64, &mut body)?;
        }
        fetch(0, &mut hdr)?;
        let h2 = DiscoveryHeader::parse(&hdr).map_err(|e| Error::Protocol(e.to_string()))?;
        if h2.genctr != h1.genctr || h2.numrec != h1.numrec {
            continue;
        }
        let entries = body
            .chunks(ENTRY_SIZE)
            .map(DiscoveryEntry::parse)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Protocol(e.to_string()))?;
        return Ok(DiscoveryLog {
            genctr: h1.genctr,
            entries,
        });
    }
    Err(Error::Protocol(format!(
        "discovery log changed during each of {MAX_ATTEMPTS} reads"
    )))
}

/// Connects to the discovery subsystem at `opts.addr`, reads the log, and
/// disconnects cleanly.
pub fn discover(opts: &ConnectOptions) -> Result<DiscoveryLog> {
    let mut o = opts.clone();
    o.subnqn = nvme::DISCOVERY_NQN.to_string();
    o.kato = std::time::Duration::ZERO;
    o.io_queues = 0;
    let c = Controller::connect(&o)?;
    let log = read_log(&mut |off, buf| c.get_log_page(lid::DISCOVERY, 0, off, buf))?;
    c.shutdown()?;
    Ok(log)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme::discovery::{encode_log, trtype};

    fn entry(n: &str) -> DiscoveryEntry {
        DiscoveryEntry {
            trtype: trtype::RDMA,
            adrfam: 1,
            subtype: 2,
            treq: 0,
            portid: 1,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: 0,
            trsvcid: "4420".into(),
            subnqn: n.into(),
            traddr: "10.0.2.15".into(),
            rdma_qptype: 1,
            rdma_prtype: 1,
            rdma_cms: 1,
            rdma_pkey: 0,
        }
    }

    #[test]
    fn reads_stable_log() {
        let log = encode_log(7, &[entry("nqn.a"), entry("nqn.b")]);
        let mut calls = 0;
        let r = read_log(&mut |off, buf| {
            calls += 1;
            nvme::log::copy_window(&log, off, buf);
            Ok(())
        })
        .unwrap();
        assert_eq!(r.genctr, 7);
        assert_eq!(r.entries.len(), 2);
        assert_eq!(r.entries[1].subnqn, "nqn.b");
        assert_eq!(calls, 3);
    }

    #[test]
    fn retries_when_genctr_moves() {
        let old = encode_log(1, &[entry("nqn.a")]);
        let new = encode_log(2, &[entry("nqn.a"), entry("nqn.c")]);
        let mut calls = 0;
        let r = read_log(&mut |off, buf| {
            calls += 1;
            // The log changes between the first header and the body.
            let page = if calls == 1 { &old } else { &new };
            nvme::log::copy_window(page, off, buf);
            Ok(())
        })
        .unwrap();
        assert_eq!(r.genctr, 2);
        assert_eq!(r.entries.len(), 2);
    }

    #[test]
    fn gives_up_on_a_log_that_never_settles() {
        let mut g = 0u64;
        let r = read_log(&mut |off, buf| {
            g += 1;
            let page = encode_log(g, &[]);
            nvme::log::copy_window(&page, off, buf);
            Ok(())
        });
        assert!(matches!(r, Err(Error::Protocol(_))));
    }
}
