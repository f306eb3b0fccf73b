//! This gateway among those that serve an RBD image: a thread that runs
//! the exchange of the gateways' record ([`crate::gateway::roster`])
//! through the RADOS object `nvmf_gw.<image id>` of the image's pool, never
//! on a worker, samples what its hosts ask of each QoS cap and applies its
//! part ([`crate::gateway::qos_share`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nvme::ana::AnaState;

use crate::backend::{GatewayState, Peer};
use crate::gateway::qos_share::{self, Demand, SAMPLE};
use crate::gateway::roster::{
    Exchanged, Roster, EXCHANGE, IDLE_EXCHANGE, MAX_RECORD, STALE_PERIODS,
};
use crate::model::qos::NsQos;

/// Conditional writes tried per exchange before the next.
const TRIES: usize = 4;

/// What the thread and the namespace share.
#[derive(Debug, Default)]
struct Shared {
    inner: Mutex<Inner>,
    wake: Condvar,
}

#[derive(Debug)]
struct Inner {
    /// Stop: the namespace goes.
    stop: bool,
    /// Its caps now.
    qos: Option<Arc<NsQos>>,
    /// This gateway's state for the image's group, as the daemon says.
    state: GatewayState,
    /// The other gateways, as last heard (`None`: not yet settled).
    peers: Option<Vec<Peer>>,
    /// Moves with each change of the caps or the state: the thread
    /// exchanges at once.
    changes: u64,
}

impl Default for Inner {
    fn default() -> Inner {
        Inner {
            stop: false,
            qos: None,
            // Until the daemon says otherwise: nothing to rely on.
            state: GatewayState {
                state: AnaState::Inaccessible,
                candidate: false,
                promoted: false,
            },
            peers: None,
            changes: 0,
        }
    }
}

/// This gateway among those that serve an image: a thread that runs the
/// exchange while the namespace is open. Dropping it stops the thread,
/// which takes this gateway's entry out of the record.
#[derive(Debug)]
pub struct Presence {
    shared: Arc<Shared>,
}

impl Presence {
    /// Starts exchanging through `object` as `key` (`gateway`: the
    /// gateway's name for people; `image`: for logs).
    pub fn start(
        object: Arc<ceph::Object>,
        key: String,
        gateway: String,
        image: String,
    ) -> std::io::Result<Presence> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::Builder::new()
            .name("rbd-peers".into())
            .spawn(move || run(&s, &object, Roster::new(&key, &gateway), &image))?;
        Ok(Presence { shared })
    }

    /// The caps changed (limits that stay keep their parts).
    pub fn set_qos(&self, qos: Arc<NsQos>) {
        let mut i = self.shared.lock();
        i.qos = (!qos.is_empty()).then_some(qos);
        i.changes += 1;
        self.shared.wake.notify_all();
    }

    /// This gateway's state for the image's group (the others hear of a
    /// change at once).
    pub fn set_state(&self, state: GatewayState) {
        let mut i = self.shared.lock();
        if i.state != state {
            i.state = state;
            i.changes += 1;
            self.shared.wake.notify_all();
        }
    }

    /// The other gateways as last heard (`None`: not settled yet, until
    /// every live one had time to write once).
    pub fn peers(&self) -> Option<Vec<Peer>> {
        self.shared.lock().peers.clone()
    }
}

impl Drop for Presence {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn run(shared: &Shared, object: &ceph::Object, mut roster: Roster, image: &str) {
    let started = Instant::now();
    let mut demand = Demand::default();
    let mut next = Instant::now();
    let mut failing: Option<Instant> = None;
    let mut alive_last = 0usize;
    let mut changes = 0u64;
    loop {
        let (qos, state) = {
            let g = shared.lock();
            let wait = match g.qos {
                Some(_) => SAMPLE,
                None => next.saturating_duration_since(Instant::now()),
            };
            let (g, _) = shared
                .wake
                .wait_timeout_while(g, wait, |i| !i.stop && i.changes == changes)
                .unwrap_or_else(|p| p.into_inner());
            if g.stop {
                break;
            }
            if g.changes != changes {
                changes = g.changes;
                next = Instant::now();
            }
            (g.qos.clone(), g.state)
        };
        let limits = qos_share::limits(qos.as_deref());
        demand.sample(&limits, Instant::now());
        let now = Instant::now();
        if now < next {
            continue;
        }
        let every = if limits.is_empty() {
            IDLE_EXCHANGE
        } else {
            EXCHANGE
        };
        next = now + every;
        let demand = demand.take();
        match exchange(object, &mut roster, state, &demand, every) {
            Ok(x) => {
                if let Some(t) = failing.take() {
                    tracing::info!(
                        image,
                        "the record of the gateways that serve the image works again after {:.1} s",
                        t.elapsed().as_secs_f64()
                    );
                }
                if x.replaced {
                    tracing::warn!(image, object = %object.spec(), "the record of the gateways could not be read (too large or not ours): replaced");
                }
                qos_share::apply(&limits, &x.parts);
                alive_last = x.peers.iter().filter(|p| p.fresh).count();
                // Settled once every live gateway had time to write twice
                // (an entry counts once it moved).
                let settled = started.elapsed() >= IDLE_EXCHANGE * 3;
                shared.lock().peers = settled.then_some(x.peers);
            }
            Err(e) => {
                let since = *failing.get_or_insert_with(|| {
                    tracing::warn!(image, "the record of the gateways that serve the image ({}): {e}; QoS parts fall back to an equal share", object.spec());
                    Instant::now()
                });
                // The others see this gateway stale after a second and take
                // its part: from then on it takes an equal share of those
                // it last saw (the image may get that much over its cap
                // while the record cannot be reached and its I/O can).
                if since.elapsed() >= Duration::from_secs(1) {
                    qos_share::at_most_equal(&limits, alive_last + 1);
                }
                // Not heard for a while: who serves the image is not known.
                if since.elapsed() >= IDLE_EXCHANGE * STALE_PERIODS {
                    shared.lock().peers = None;
                }
            }
        }
    }
    for _ in 0..TRIES {
        let Ok(Some((data, version))) = object.read_head(MAX_RECORD) else {
            break;
        };
        let Some(out) = roster.leave(&data) else {
            break;
        };
        match object.write(&out, Some(version)) {
            Err(ceph::WriteError::Changed) => continue,
            _ => break,
        }
    }
}

/// One exchange through the object.
fn exchange(
    object: &ceph::Object,
    roster: &mut Roster,
    state: GatewayState,
    demand: &BTreeMap<String, f64>,
    every: Duration,
) -> Result<Exchanged, ceph::Error> {
    for _ in 0..TRIES {
        let cur = object.read_head(MAX_RECORD)?;
        let x = roster.exchange(
            cur.as_ref().map(|(d, _)| &d[..]),
            state,
            demand,
            every,
            Instant::now(),
        );
        match object.write(&x.record, cur.map(|(_, v)| v)) {
            Ok(_) => return Ok(x),
            Err(ceph::WriteError::Changed) => continue,
            Err(ceph::WriteError::Failed(e)) => return Err(e),
        }
    }
    Err(ceph::Error::Library(
        "the record kept changing under this gateway's writes".into(),
    ))
}
