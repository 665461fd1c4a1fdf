//! A priority level's seats and queues: who executes now, who waits, and in which order.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::{LevelConfig, Refusal};

/// A priority level: seats shared by flows, a bounded queue per flow, and each flow's count of
/// long-running requests.
///
/// A request takes as many seats as its [width](super::work::width) (APF's work estimate: a LIST
/// of many objects is several seats), at most its flow's share. Seats are granted flow by flow
/// in turn; when the flow whose turn it is waits for more seats than are free, nothing else is
/// granted until they are, so that a wide request is never starved by narrow ones.
#[derive(Debug)]
pub struct Level {
    config: LevelConfig,
    queue_wait: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Seats taken, all flows together.
    in_use: usize,
    /// Flows that execute, wait or hold long-running requests (idle flows are forgotten).
    flows: HashMap<String, FlowState>,
    /// Flows with waiting requests, in the order they are served next.
    ring: VecDeque<String>,
    /// Whether seats are held back for the request at the front of the ring, which waits for
    /// more seats than are free: no request may then take a seat without queueing.
    holding: bool,
    next_waiter: u64,
}

#[derive(Debug, Default)]
struct FlowState {
    /// Seats the flow's executing requests hold.
    executing: usize,
    waiting: VecDeque<Waiter>,
    long_running: usize,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    width: usize,
    grant: oneshot::Sender<()>,
}

impl FlowState {
    fn idle(&self) -> bool {
        self.executing == 0 && self.waiting.is_empty() && self.long_running == 0
    }
}

impl State {
    fn forget_if_idle(&mut self, flow: &str) {
        if self.flows.get(flow).is_some_and(FlowState::idle) {
            self.flows.remove(flow);
        }
    }

    /// Give free seats to waiting requests, flow by flow in turn: the first flow in the ring
    /// whose next request fits its share has its turn, and goes to the back of the ring once
    /// served. A turn whose request needs more seats than are free keeps them for it.
    fn dispatch(&mut self, config: &LevelConfig) {
        self.holding = false;
        loop {
            let mut turn = None;
            for (at, name) in self.ring.iter().enumerate() {
                let Some(flow) = self.flows.get(name) else { continue };
                let Some(next) = flow.waiting.front() else { continue };
                if flow.executing + next.width <= config.seats_per_flow {
                    turn = Some((at, next.width));
                    break;
                }
            }
            let Some((at, width)) = turn else { return };
            if self.in_use + width > config.seats {
                self.holding = true;
                return;
            }
            let Some(name) = self.ring.remove(at) else { return };
            let Some(flow) = self.flows.get_mut(&name) else { continue };
            let Some(waiter) = flow.waiting.pop_front() else { continue };
            // A waiter leaves the queue itself when it gives up (`Waiting::drop`), so its
            // receiver is still there; should it not be, the seats simply stay free.
            if waiter.grant.send(()).is_ok() {
                flow.executing += width;
                self.in_use += width;
            }
            if flow.waiting.is_empty() {
                self.forget_if_idle(&name);
            } else {
                self.ring.push_back(name);
            }
        }
    }

    fn release(&mut self, config: &LevelConfig, flow: &str, width: usize) {
        self.in_use = self.in_use.saturating_sub(width);
        if let Some(state) = self.flows.get_mut(flow) {
            state.executing = state.executing.saturating_sub(width);
        }
        self.forget_if_idle(flow);
        self.dispatch(config);
    }
}

impl Level {
    /// A level with `config`'s limits, whose requests wait at most `queue_wait` for a seat.
    pub fn new(config: LevelConfig, queue_wait: Duration) -> Arc<Level> {
        let config = LevelConfig {
            seats: config.seats.max(1),
            seats_per_flow: config.seats_per_flow.clamp(1, config.seats.max(1)),
            ..config
        };
        Arc::new(Level { config, queue_wait, state: Mutex::default() })
    }

    /// The level's limits (a flow's share at most its seats, both at least one).
    pub fn config(&self) -> &LevelConfig {
        &self.config
    }

    /// `width` seats (one at least, at most the flow's share) for a request of `flow`: at once
    /// if they are free to it, else after waiting in the flow's queue. Dropping the future gives
    /// up its place in the queue (or the seats granted).
    pub async fn seat(self: &Arc<Self>, flow: &str, width: usize) -> Result<Seat, Refusal> {
        let width = width.clamp(1, self.config.seats_per_flow);
        let (id, granted) = {
            let mut guard = self.state.lock();
            let state = &mut *guard;
            if !state.flows.contains_key(flow) {
                state.flows.insert(flow.to_owned(), FlowState::default());
            }
            let Some(queue) = state.flows.get_mut(flow) else { unreachable!("inserted above") };
            if queue.waiting.is_empty()
                && !state.holding
                && queue.executing + width <= self.config.seats_per_flow
                && state.in_use + width <= self.config.seats
            {
                queue.executing += width;
                state.in_use += width;
                return Ok(Seat { level: self.clone(), flow: flow.to_owned(), width });
            }
            if queue.waiting.len() >= self.config.queue_length {
                state.forget_if_idle(flow);
                return Err(Refusal::QueueFull);
            }
            let id = state.next_waiter;
            state.next_waiter += 1;
            let (grant, granted) = oneshot::channel();
            queue.waiting.push_back(Waiter { id, width, grant });
            if queue.waiting.len() == 1 {
                state.ring.push_back(flow.to_owned());
            }
            // Its turn may be now (seats are free, but too few for it: they are kept for it).
            state.dispatch(&self.config);
            (id, granted)
        };
        let mut waiting = Waiting { level: self, flow, id, width, granted, seated: false };
        match tokio::time::timeout(self.queue_wait, &mut waiting.granted).await {
            Ok(Ok(())) => {
                waiting.seated = true;
                Ok(Seat { level: self.clone(), flow: flow.to_owned(), width })
            }
            // The grant was dropped unsent: only a level torn down does that.
            Ok(Err(_)) => Err(Refusal::TimedOut),
            Err(_) => Err(Refusal::TimedOut),
        }
    }

    /// Count a long-running request of `flow`, if the flow may open another.
    pub fn long_running(self: &Arc<Self>, flow: &str) -> Result<LongRunning, Refusal> {
        let mut state = self.state.lock();
        let open = state.flows.get(flow).map_or(0, |f| f.long_running);
        if open >= self.config.long_running_per_flow {
            return Err(Refusal::TooManyLongRunning);
        }
        state.flows.entry(flow.to_owned()).or_default().long_running += 1;
        Ok(LongRunning { level: self.clone(), flow: flow.to_owned() })
    }

    /// Seats taken now, all flows together.
    pub fn seats_in_use(&self) -> usize {
        self.state.lock().in_use
    }

    /// Requests of `flow` waiting for seats now.
    pub fn waiting(&self, flow: &str) -> usize {
        self.state.lock().flows.get(flow).map_or(0, |f| f.waiting.len())
    }

    /// Long-running requests of `flow` open now.
    pub fn long_running_open(&self, flow: &str) -> usize {
        self.state.lock().flows.get(flow).map_or(0, |f| f.long_running)
    }

    /// Flows the level keeps state for (executing, waiting or holding long-running requests).
    pub fn flows(&self) -> usize {
        self.state.lock().flows.len()
    }
}

/// A request's place in its flow's queue, while it waits for seats.
struct Waiting<'a> {
    level: &'a Arc<Level>,
    flow: &'a str,
    id: u64,
    width: usize,
    granted: oneshot::Receiver<()>,
    seated: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.seated {
            return;
        }
        let mut state = self.level.state.lock();
        if let Some(queue) = state.flows.get_mut(self.flow) {
            if let Some(at) = queue.waiting.iter().position(|w| w.id == self.id) {
                queue.waiting.remove(at);
                if queue.waiting.is_empty() {
                    state.ring.retain(|f| f != self.flow);
                }
                state.forget_if_idle(self.flow);
                // It may have been the request seats were held back for.
                state.dispatch(&self.level.config);
                return;
            }
        }
        // Not in the queue: seats were granted (under the same lock) that nobody will use.
        self.granted.close();
        if self.granted.try_recv().is_ok() {
            state.release(&self.level.config, self.flow, self.width);
        }
    }
}

/// Seats, held while a request executes; dropping them gives them to the next waiters.
#[derive(Debug)]
pub struct Seat {
    level: Arc<Level>,
    flow: String,
    width: usize,
}

impl Seat {
    /// The seats held.
    pub fn width(&self) -> usize {
        self.width
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.level.state.lock().release(&self.level.config, &self.flow, self.width);
    }
}

/// A long-running request counted against its flow's bound while it is open.
#[derive(Debug)]
pub struct LongRunning {
    level: Arc<Level>,
    flow: String,
}

impl Drop for LongRunning {
    fn drop(&mut self) {
        let mut state = self.level.state.lock();
        if let Some(flow) = state.flows.get_mut(&self.flow) {
            flow.long_running = flow.long_running.saturating_sub(1);
        }
        state.forget_if_idle(&self.flow);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn level(seats: usize, seats_per_flow: usize, queue_length: usize) -> Arc<Level> {
        let config = LevelConfig { seats, seats_per_flow, queue_length, long_running_per_flow: 2 };
        Level::new(config, Duration::from_secs(30))
    }

    /// Yield until `done` holds (the tasks it waits for run on this test's runtime).
    pub(crate) async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the condition never held");
    }

    fn waiter(
        level: &Arc<Level>,
        flow: &'static str,
    ) -> tokio::task::JoinHandle<Result<Seat, Refusal>> {
        wide_waiter(level, flow, 1)
    }

    fn wide_waiter(
        level: &Arc<Level>,
        flow: &'static str,
        width: usize,
    ) -> tokio::task::JoinHandle<Result<Seat, Refusal>> {
        let level = level.clone();
        tokio::spawn(async move { level.seat(flow, width).await })
    }

    #[tokio::test]
    async fn a_wide_request_takes_its_seats_at_most_its_flows_share() {
        let level = level(8, 4, 4);
        let wide = level.seat("a", 3).await.unwrap();
        assert_eq!((wide.width(), level.seats_in_use()), (3, 3));
        // Wider than the share: clamped to it (after a's 3 seats come back).
        let widest = wide_waiter(&level, "a", 10);
        until(|| level.waiting("a") == 1).await;
        drop(wide);
        let widest = widest.await.unwrap().unwrap();
        assert_eq!((widest.width(), level.seats_in_use()), (4, 4));
        // Another flow still finds its seats.
        let b = level.seat("b", 2).await.unwrap();
        assert_eq!(level.seats_in_use(), 6);
        drop((widest, b));
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_wide_request_whose_turn_it_is_is_not_overtaken_by_narrow_ones() {
        let level = level(4, 4, 8);
        let a1 = level.seat("a", 1).await.unwrap();
        let a2 = level.seat("a", 1).await.unwrap();
        let b1 = level.seat("b", 1).await.unwrap();
        // c wants all four seats; one is free.
        let c = wide_waiter(&level, "c", 4);
        until(|| level.waiting("c") == 1).await;
        drop(a1);
        // Two free now, which c's turn keeps: d's one-seat request queues behind it.
        let d = waiter(&level, "d");
        until(|| level.waiting("d") == 1).await;
        assert_eq!(level.seats_in_use(), 2);
        drop((a2, b1));
        let c = c.await.unwrap().unwrap();
        assert_eq!((c.width(), level.seats_in_use()), (4, 4));
        assert!(!d.is_finished());
        drop(c);
        drop(d.await.unwrap().unwrap());
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn seats_kept_for_a_wide_request_that_gives_up_go_to_the_next() {
        let level = level(2, 2, 8);
        let a = level.seat("a", 1).await.unwrap();
        let wide = wide_waiter(&level, "b", 2);
        until(|| level.waiting("b") == 1).await;
        let narrow = waiter(&level, "c");
        until(|| level.waiting("c") == 1).await;
        // The wide request goes: the free seat is no longer kept, c takes it.
        wide.abort();
        let narrow = narrow.await.unwrap().unwrap();
        assert_eq!(level.seats_in_use(), 2);
        drop((a, narrow));
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_free_seat_is_taken_at_once_and_given_back() {
        let level = level(2, 2, 4);
        let a = level.seat("a", 1).await.unwrap();
        let b = level.seat("a", 1).await.unwrap();
        assert_eq!(level.seats_in_use(), 2);
        drop(a);
        drop(b);
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0, "idle flows are forgotten");
    }

    #[tokio::test]
    async fn flows_with_waiting_requests_are_served_in_turn() {
        let level = level(1, 1, 8);
        let first = level.seat("a", 1).await.unwrap();
        // Three of a's requests queue before two of b's.
        let mut queued = Vec::new();
        for (flow, n) in [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)] {
            queued.push((format!("{flow}{n}"), waiter(&level, flow)));
            until(|| level.waiting("a") + level.waiting("b") == queued.len()).await;
        }
        drop(first);
        let mut order = Vec::new();
        while !queued.is_empty() {
            // Exactly one waiter has the seat: take it, note it, give the seat back.
            let at = loop {
                if let Some(at) = queued.iter().position(|(_, h)| h.is_finished()) {
                    break at;
                }
                tokio::task::yield_now().await;
            };
            let (name, handle) = queued.remove(at);
            let seat = handle.await.unwrap().unwrap();
            assert_eq!(level.seats_in_use(), 1);
            order.push(name);
            drop(seat);
        }
        assert_eq!(order, ["a1", "b1", "a2", "b2", "a3"]);
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_flow_holds_at_most_its_share_and_another_flow_finds_a_seat() {
        let level = level(4, 2, 8);
        let a1 = level.seat("a", 1).await.unwrap();
        let _a2 = level.seat("a", 1).await.unwrap();
        let a3 = waiter(&level, "a");
        until(|| level.waiting("a") == 1).await;
        // b is seated at once although a waits: a holds its share.
        let b = tokio::time::timeout(Duration::from_secs(5), level.seat("b", 1)).await;
        let _b = b.expect("b is seated at once").unwrap();
        assert_eq!(level.seats_in_use(), 3);
        assert!(!a3.is_finished());
        drop(a1);
        assert!(a3.await.unwrap().is_ok());
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_other_flows_still_queue() {
        let level = level(1, 1, 2);
        let seat = level.seat("a", 1).await.unwrap();
        let [a1, a2] = [waiter(&level, "a"), waiter(&level, "a")];
        until(|| level.waiting("a") == 2).await;
        assert_eq!(level.seat("a", 1).await.unwrap_err(), Refusal::QueueFull);
        let b = waiter(&level, "b");
        until(|| level.waiting("b") == 1).await;
        // Served in turn: a, b, a.
        drop(seat);
        for handle in [a1, b, a2] {
            drop(handle.await.unwrap().unwrap());
        }
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_request_that_waits_too_long_is_refused_and_leaves_the_queue() {
        let config =
            LevelConfig { seats: 1, seats_per_flow: 1, queue_length: 4, long_running_per_flow: 1 };
        let level = Level::new(config, Duration::from_millis(50));
        let seat = level.seat("a", 1).await.unwrap();
        assert_eq!(level.seat("b", 1).await.unwrap_err(), Refusal::TimedOut);
        assert_eq!(level.waiting("b"), 0);
        drop(seat);
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_the_queue() {
        let level = level(1, 1, 4);
        let seat = level.seat("a", 1).await.unwrap();
        let gone = waiter(&level, "b");
        let stays = waiter(&level, "c");
        until(|| level.waiting("b") == 1 && level.waiting("c") == 1).await;
        gone.abort();
        until(|| level.waiting("b") == 0).await;
        drop(seat);
        // The seat goes to the waiter still there, not to the one gone.
        let seat = stays.await.unwrap().unwrap();
        assert_eq!(level.seats_in_use(), 1);
        drop(seat);
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn a_seat_granted_to_a_waiter_that_gave_up_is_given_back() {
        let level = level(1, 1, 4);
        let seat = level.seat("a", 1).await.unwrap();
        let gone = waiter(&level, "b");
        until(|| level.waiting("b") == 1).await;
        // The seat is granted to the waiter, which is cancelled before it runs again.
        drop(seat);
        assert_eq!(level.seats_in_use(), 1);
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled());
        assert_eq!(level.seats_in_use(), 0);
        assert_eq!(level.flows(), 0);
    }

    #[tokio::test]
    async fn long_running_requests_are_bounded_per_flow() {
        let level = level(1, 1, 1);
        let one = level.long_running("a").unwrap();
        let _two = level.long_running("a").unwrap();
        assert_eq!(level.long_running("a").unwrap_err(), Refusal::TooManyLongRunning);
        assert!(level.long_running("b").is_ok(), "another flow has its own bound");
        // They take no seat.
        assert_eq!(level.seats_in_use(), 0);
        drop(one);
        assert_eq!(level.long_running_open("a"), 1);
        assert!(level.long_running("a").is_ok());
    }
}
