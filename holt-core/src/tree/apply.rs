//! Atomic batches: find each key's frame, latch the frames in id order, check every condition,
//! log once, apply, publish, then split frames that grew past the budget and merge frames
//! that shrank below a quarter of it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use smallvec::{smallvec, SmallVec};

use super::node::{first_own_byte, Cell, Footprint, Leaf, Node, Shared, WEIGHT_MAX};
use super::write::Change;
use super::{codec, split, walk_frame, write, ImageState, Tree, Walk};
use crate::api::{Condition, Op, Version, KEY_LEN_MAX, VALUE_LEN_MAX};
use crate::error::{Error, Result};
use crate::format::FrameId;
use crate::sync::Latched;

/// What a batch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApplyOutcome {
    /// The sequence number the log callback returned: the version of every value written.
    pub version: u64,
    /// For each op, whether its key held a value just before the op (earlier ops of the same
    /// batch included).
    pub existed: SmallVec<[bool; 1]>,
}

/// Rejects keys and values outside the limits before anything is latched or logged.
pub(crate) fn validate_ops(ops: &[Op<'_>]) -> Result<()> {
    for op in ops {
        let key = op.key();
        if key.is_empty() || key.len() > KEY_LEN_MAX {
            return Err(Error::KeyLength { len: key.len() });
        }
        if let Op::Put { value, .. } = op {
            if value.len() > VALUE_LEN_MAX {
                return Err(Error::ValueTooLarge { len: value.len() });
            }
        }
    }
    Ok(())
}

fn condition_holds(condition: Condition, current: Option<u64>) -> bool {
    match condition {
        Condition::None => true,
        Condition::Absent => current.is_none(),
        Condition::Present => current.is_some(),
        Condition::Version(Version(v)) => current == Some(v),
    }
}

/// One latched frame's working state during a batch.
struct Working {
    cell: Arc<Cell>,
    root: Node,
    size_delta: Footprint,
    changed: bool,
}

impl Tree {
    /// Applies `ops` atomically. Conditions are checked against the state before the batch,
    /// with every touched frame latched; then `log` is called once (it makes the batch durable
    /// and returns its sequence number, which becomes the version of every value written);
    /// then the ops are applied in order and published. If a condition fails, nothing is
    /// logged or applied and `Error::ConditionFailed` is returned.
    pub(crate) fn apply(&self, ops: &[Op<'_>], log: &mut dyn FnMut() -> Result<u64>) -> Result<ApplyOutcome> {
        self.apply_ops(ops, true, log)
    }

    /// Re-applies a logged batch during recovery: conditions are not checked (they held when
    /// the batch was logged), and `seq` is its sequence number.
    pub(crate) fn replay(&self, ops: &[Op<'_>], seq: u64) -> Result<()> {
        self.apply_ops(ops, false, &mut || Ok(seq)).map(|_| ())
    }

    fn apply_ops(
        &self,
        ops: &[Op<'_>],
        check_conditions: bool,
        log: &mut dyn FnMut() -> Result<u64>,
    ) -> Result<ApplyOutcome> {
        validate_ops(ops)?;
        if let [op] = ops {
            if let Some(outcome) = self.apply_one(op, check_conditions, log)? {
                return Ok(outcome);
            }
        } else if let Some(outcome) = self.apply_unloaded(ops, check_conditions, log)? {
            return Ok(outcome);
        }
        // Parent frames a write may have to republish as well (see `Attempt::LatchParents`).
        let mut parents: Vec<Arc<Cell>> = Vec::new();
        let mut attempts = Attempts { refused: HashSet::new(), states: Vec::with_capacity(ops.len()) };
        // Bound: each retry follows a split or merge that another writer completed, adds
        // parents to latch (a frame has one), or refuses a frame a recording (at most once each).
        loop {
            // Owners are loaded while the cache has room; once it is full, an evicted owner is
            // left evicted: its writes may be recorded in its change log (`apply_latched`).
            let mut owners: Vec<(Arc<Cell>, usize)> = Vec::with_capacity(ops.len());
            attempts.states.clear();
            for op in ops {
                let (owner, state) = self.find_owner(op.key())?;
                owners.push(owner);
                attempts.states.push(state);
            }
            // Owners found, what they hold read, nothing latched: a test writes here.
            fail::fail_point!("apply-before-latch");
            let cells: Vec<Arc<Cell>> =
                owners.iter().map(|(c, _)| Arc::clone(c)).chain(parents.iter().cloned()).collect();
            let latched = Latched::acquire(&cells);
            match self.apply_latched(ops, &owners, &latched, check_conditions, log, &mut attempts)? {
                Attempt::Done(outcome, touched) => {
                    drop(latched);
                    // Published, merges not yet run, nothing latched: a test lists here.
                    fail::fail_point!("apply-before-merges");
                    for cell in touched {
                        self.try_merge(&cell)?;
                    }
                    // A batch may grow resident frames and change logs by many keys, past
                    // the budget; frames it left dirty may go (`FrameCell::detach_changes`).
                    self.pool.evict_if_needed();
                    return Ok(outcome);
                }
                // Parents are found again: one may have been merged away meanwhile.
                Attempt::Retry => parents.clear(),
                Attempt::LatchParents(more) => {
                    drop(latched);
                    parents.extend(more);
                    // Nothing latched or logged: a test rewires the frames here.
                    fail::fail_point!("apply-latch-parents");
                }
            }
        }
    }

    /// Parent frames this batch must hold latched besides its own (those found not latched
    /// yet; the batch latches them and looks again, before anything is logged). Two kinds of
    /// frame need their parent:
    /// - a frame whose root may stop beginning with the byte it begins with now (its lead,
    ///   which the node holding its link may count on: see `Inner::lead`): a put whose key
    ///   does not continue with that byte where the frame starts;
    /// - a frame the batch may leave empty, which it unlinks from its parent in the same
    ///   publication (`unlink_emptied`): at least as many deletes as its root holds keys and
    ///   links, counting as deleted the links to child frames that may be left empty too. A
    ///   root that collapses into its last child keeps its prefix in front, so only a frame
    ///   left empty loses its first byte to deletes.
    ///
    /// Conservative: a frame that may empty is assumed to.
    fn parents_needed(
        work: &HashMap<FrameId, Working>,
        ops: &[Op<'_>],
        owners: &[(Arc<Cell>, usize)],
    ) -> Vec<Arc<Cell>> {
        let mut deletes: HashMap<FrameId, usize> = HashMap::new();
        let mut queue: Vec<FrameId> = Vec::new();
        for (op, (cell, depth)) in ops.iter().zip(owners) {
            let Some(w) = work.get(&cell.id) else { continue };
            match op {
                Op::Put { key, .. } => {
                    if may_change_lead(&w.root, key, *depth) {
                        queue.push(cell.id);
                    }
                }
                Op::Delete { .. } => *deletes.entry(cell.id).or_default() += 1,
            }
        }
        let mut may_empty: HashSet<FrameId> =
            deletes.iter().filter(|&(id, &n)| n >= holdings(&work[id].root)).map(|(&id, _)| id).collect();
        queue.extend(may_empty.iter().copied());
        let mut emptied_links: HashMap<FrameId, usize> = HashMap::new();
        let mut needed: Vec<Arc<Cell>> = Vec::new();
        while let Some(id) = queue.pop() {
            let Some(parent) = work[&id].cell.parent() else { continue };
            let Some(pw) = work.get(&parent.id) else {
                needed.push(parent);
                continue;
            };
            if !may_empty.contains(&id) {
                continue;
            }
            let links = emptied_links.entry(parent.id).or_default();
            *links += 1;
            let removed = *links + deletes.get(&parent.id).copied().unwrap_or(0);
            if removed >= holdings(&pw.root) && may_empty.insert(parent.id) {
                queue.push(parent.id);
            }
        }
        needed.sort_unstable_by_key(|c| c.id);
        needed.dedup_by_key(|c| c.id);
        needed
    }

    /// Unlinks every frame the batch left empty from its parent's working root, deepest
    /// first, so a parent left empty by that goes too; the frames unlinked leave `work`
    /// (they are retired at publication, never published). A listing rolls subtrees up
    /// unread, so no published state may link an empty frame (`Tree::try_merge`). The
    /// parents are latched: `parents_needed` made sure.
    fn unlink_emptied(&self, work: &mut HashMap<FrameId, Working>) -> Vec<Arc<Cell>> {
        let mut unlinked = Vec::new();
        loop {
            let emptied = work
                .values()
                .filter(|w| w.changed && w.cell.id != self.root.id && w.root.is_empty())
                .max_by_key(|w| frame_depth(&w.cell))
                .map(|w| Arc::clone(&w.cell));
            let Some(child) = emptied else { return unlinked };
            let parent = child.parent().filter(|p| work.contains_key(&p.id));
            let new_root = parent.as_ref().and_then(|p| split::without_link(&work[&p.id].root, &child));
            let (Some(parent), Some(root)) = (parent, new_root) else {
                // Published empty instead; `try_merge` unlinks it after the batch.
                debug_assert!(false, "frame {} emptied with its parent not latched", child.id);
                tracing::error!(frame = %child.id, "frame emptied with its parent not latched");
                return unlinked;
            };
            work.remove(&child.id);
            let pw = work.get_mut(&parent.id).expect("checked above");
            let (old, new) = (pw.cell.size(), split::frame_size(&root));
            pw.size_delta = Footprint {
                encoded: new.encoded as isize - old.encoded as isize,
                memory: new.memory as isize - old.memory as isize,
            };
            pw.root = root;
            pw.changed = true;
            pw.cell.rewrite_whole();
            unlinked.push(child);
        }
    }

    /// For every frame of `work` whose new root lost the first byte its cell records, clears
    /// the lead of the node holding its link in the parent frame's working root (the parent
    /// is latched: `parents_needed` made sure). Returns those frames with their parents,
    /// parents first: the order they are published in.
    fn withdraw_link_leads(work: &mut HashMap<FrameId, Working>) -> Vec<FrameId> {
        let lost: Vec<Arc<Cell>> = work
            .values()
            .filter(|w| w.changed && w.cell.lead().is_some() && w.cell.lead() != first_own_byte(&w.root))
            .map(|w| Arc::clone(&w.cell))
            .collect();
        let mut order: Vec<(usize, FrameId)> = Vec::new();
        for child in lost {
            let Some(parent) = child.parent() else { continue };
            let Some(pw) = work.get_mut(&parent.id) else {
                debug_assert!(false, "frame {} lost its lead with its parent not latched", child.id);
                tracing::error!(frame = %child.id, "frame lost its lead with its parent not latched");
                continue;
            };
            if let Some(root) = split::without_link_lead(&pw.root, &child) {
                pw.root = root;
                pw.changed = true;
                pw.cell.rewrite_whole();
            }
            order.push((frame_depth(&child), child.id));
            order.push((frame_depth(&parent), parent.id));
        }
        order.sort_unstable();
        order.dedup();
        order.into_iter().map(|(_, id)| id).collect()
    }

    /// The part of a batch that runs with every owner frame latched. Returns `None` when a
    /// frame was split or merged since the owners were found (the caller retries), and the
    /// frames that shrank below the merge threshold otherwise.
    ///
    /// While the cache is full, the ops ending in an evicted owner frame are recorded in its
    /// change log (`plan_unloaded`, `record_planned`) unless the frame is `Attempts::refused`: a
    /// batch of random keys (a bulk load) would otherwise load a frame per key and keep
    /// each, dirty, until a checkpoint, so the heap outgrew the budget by whole frames. The
    /// load locks of those frames are taken under the gate, in id order (as the checkpoint
    /// takes them), and held from reading the keys' states until the writes are recorded. A
    /// frame whose writes cannot be recorded so is refused, and the batch starts again,
    /// loading it.
    fn apply_latched(
        &self,
        ops: &[Op<'_>],
        owners: &[(Arc<Cell>, usize)],
        latched: &Latched<'_, Node>,
        check_conditions: bool,
        log: &mut dyn FnMut() -> Result<u64>,
        attempts: &mut Attempts,
    ) -> Result<Attempt> {
        let Attempts { refused, states } = attempts;
        // The evicted owners to record in, in id order, each with its entry depth and its ops.
        let mut unloaded: BTreeMap<FrameId, (Arc<Cell>, usize, Vec<Placed<'_, '_>>)> = BTreeMap::new();
        if self.pool.is_full_for_writes() {
            for (at, (op, (cell, depth))) in ops.iter().zip(owners).enumerate() {
                if !refused.contains(&cell.id) && cell.root.load().is_none() {
                    unloaded
                        .entry(cell.id)
                        .or_insert_with(|| (Arc::clone(cell), *depth, Vec::new()))
                        .2
                        .push((at, op, states[at]));
                }
            }
        }
        let mut work: HashMap<FrameId, Working> = HashMap::with_capacity(latched.cells.len());
        for cell in &latched.cells {
            if cell.is_retired() {
                return Ok(Attempt::Retry);
            }
            if unloaded.contains_key(&cell.id) {
                continue;
            }
            let root = self.load_root(cell)?;
            work.insert(
                cell.id,
                Working { cell: Arc::clone(cell), root, size_delta: Footprint::ZERO, changed: false },
            );
        }
        // Re-validate ownership and read the current versions for the conditions (of the
        // ops recorded unloaded, `plan_unloaded` does both).
        let mut current: Vec<Option<u64>> = Vec::with_capacity(ops.len());
        for (op, (cell, depth)) in ops.iter().zip(owners) {
            let Some(w) = work.get(&cell.id) else {
                current.push(None);
                continue;
            };
            match walk_frame(&w.root, op.key(), *depth) {
                Walk::Here(leaf) => current.push(leaf.map(|l| l.version())),
                Walk::Link(..) => return Ok(Attempt::Retry),
            }
        }
        let unlatched = Self::parents_needed(&work, ops, owners);
        if !unlatched.is_empty() {
            // A parent whose root the batch may change is loaded, never recorded in.
            refused.extend(unlatched.iter().map(|c| c.id));
            return Ok(Attempt::LatchParents(unlatched));
        }
        if check_conditions {
            for ((op, cur), (cell, _)) in ops.iter().zip(&current).zip(owners) {
                if !unloaded.contains_key(&cell.id) && !condition_holds(op.condition(), *cur) {
                    return Err(Error::ConditionFailed);
                }
            }
        }
        // A named point between latching and the gate, so a test can widen that window.
        fail::fail_point!("apply-before-gate");
        // Held from the log record to publication (and any split), released before merges;
        // the frames are latched already (see `Tree::gate` for the lock order).
        let _gate = self.gate_read();
        // Declared after the gate, so released before it.
        let held: Vec<_> = unloaded.values().map(|(cell, ..)| cell.hold_loads()).collect();
        let mut recordings = Vec::with_capacity(unloaded.len());
        // Every frame is planned before starting again, so that one retry loads all the
        // frames refused (a retry finds every owner again).
        let mut retry = false;
        for ((cell, depth, placed), held) in unloaded.values().zip(&held) {
            let plan = match may_record_unloaded(cell, placed, *depth) {
                true => self.pool.read_image_held(cell, held, |image, deltas| {
                    self.plan_unloaded(cell, placed, *depth, check_conditions, image, deltas)
                })?,
                false => None,
            };
            match plan {
                Some(Plan::Record(recording)) => recordings.push(recording),
                // The owner search read an older shape (a split since).
                Some(Plan::Descend(..)) => retry = true,
                Some(Plan::Load) | None => {
                    refused.insert(cell.id);
                    retry = true;
                }
            }
        }
        if retry {
            return Ok(Attempt::Retry);
        }
        let seq = log()?;
        let mut existed: SmallVec<[bool; 1]> = smallvec![false; ops.len()];
        for ((cell, depth, placed), recording) in unloaded.values().zip(recordings) {
            self.record_planned(cell, placed, *depth, recording, seq, &mut existed);
        }
        drop(held);
        // Counted once every op has applied, as the key count always was.
        let mut counts: SmallVec<[(Arc<Cell>, i64, i64); 4]> = SmallVec::new();
        for (at, (op, (cell, depth))) in ops.iter().zip(owners).enumerate() {
            if unloaded.contains_key(&cell.id) {
                continue;
            }
            let Some(w) = work.get_mut(&cell.id) else { return Ok(Attempt::Retry) };
            let weight = match op {
                Op::Put { value, .. } => (self.weigh)(value),
                Op::Delete { .. } => 0,
            };
            let mut change = match op {
                Op::Put { key, value, .. } => write::put(&w.root, key, *depth, value, seq, weight)?,
                Op::Delete { key, .. } => write::delete(&w.root, key, *depth)?,
            };
            let (keys, weight) = usage_change(op, change.existed, change.old_weight, weight);
            if keys != 0 || weight != 0 {
                counts.push((Arc::clone(&w.cell), keys, weight));
            }
            existed[at] = change.existed;
            if !change.root.same(&w.root) {
                w.changed = true;
                record_change(&w.cell, op, *depth, change.stored.take());
            }
            w.root = change.root;
            w.size_delta += change.size_delta;
        }
        for (cell, keys, weight) in counts {
            self.count_usage(&cell, keys, weight);
        }
        let unlinked = self.unlink_emptied(&mut work);
        // Parents republished before their children: a reader that sees a frame's new root
        // never meets, above its link, a lead that root lacks.
        let first = Self::withdraw_link_leads(&mut work);
        // Retired before the parents that no longer link them are published: a reader that
        // still holds an old parent and enters one restarts (the read protocol in `sync`).
        for cell in unlinked {
            cell.retire();
            self.frames.lock().remove(&cell.id);
            self.pool.resized(-(cell.size().memory as i64));
            self.release_retired(&cell);
            self.shape.emptied_unlinked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!(frame = %cell.id, "emptied frame unlinked");
        }
        let first: Vec<Working> = first.iter().filter_map(|id| work.remove(id)).collect();
        let small = self.publish(first.into_iter().chain(work.into_values()))?;
        Ok(Attempt::Done(ApplyOutcome { version: seq, existed }, small))
    }

    /// Publishes a batch's changed frames in the order given (size first, then root, then
    /// dirty mark), splits those that grew past the budget (still latched), and returns those
    /// left below a quarter of it: the candidates for a merge once the latches are released.
    fn publish(&self, work: impl Iterator<Item = Working>) -> Result<Vec<Arc<Cell>>> {
        let mut small = Vec::new();
        for w in work.filter(|w| w.changed) {
            let root = w.root;
            if self.publish_frame(&w.cell, w.size_delta, |cell| cell.publish(root))? {
                small.push(w.cell);
            }
        }
        Ok(small)
    }

    /// `publish` for one frame whose new root `store` publishes; whether the frame is left
    /// small enough to be a merge candidate.
    fn publish_frame(
        &self,
        cell: &Arc<Cell>,
        size_delta: Footprint,
        store: impl FnOnce(&Cell),
    ) -> Result<bool> {
        let size = cell.size().grown(size_delta);
        cell.set_size(size);
        store(cell);
        cell.mark_dirty();
        self.pool.resized(size_delta.memory as i64);
        if size.encoded > self.frame_budget_bytes {
            self.split_oversized(cell)?;
        }
        Ok(cell.size_bytes() < self.frame_budget_bytes / 4 && cell.id != self.root.id)
    }

    /// A batch of one op: the steps of `apply_latched` for a single frame, with one walk
    /// under the latch instead of two (`write::descend` finds where the write lands and the
    /// key's current version, and the write builds on that path after the log call) and
    /// without the per-batch maps. `None`, with nothing latched, logged or applied, when the
    /// op needs the frame's parent latched as well (`parents_needed`: a put that may change
    /// the frame's first byte, a delete that may empty it); the caller then takes the general
    /// path.
    fn apply_one(
        &self,
        op: &Op<'_>,
        check_conditions: bool,
        log: &mut dyn FnMut() -> Result<u64>,
    ) -> Result<Option<ApplyOutcome>> {
        let key = op.key();
        // Where the owner walk goes on from: the frame an evicted frame's image linked to.
        let mut from = None;
        loop {
            let (cell, depth) = self.find_owner_unloaded(key, from.take())?;
            let latch = cell.latch.lock();
            if cell.is_retired() {
                continue;
            }
            match self.write_unloaded(&cell, std::slice::from_ref(op), depth, check_conditions, log)? {
                Unloaded::Done(outcome) => return Ok(Some(outcome)),
                Unloaded::Descend(child, depth) => {
                    from = Some((child, depth));
                    continue;
                }
                Unloaded::Load => {}
            }
            let root = self.load_root(&cell)?;
            let needs_parent = cell.lead() != first_own_byte(&root)
                || match op {
                    Op::Put { .. } => may_change_lead(&root, key, depth),
                    Op::Delete { .. } => holdings(&root) <= 1,
                };
            if needs_parent {
                return Ok(None);
            }
            // A split since `find_owner`: the key's path now leaves this frame.
            let Some(path) = write::descend(&root, key, depth) else { continue };
            if check_conditions && !condition_holds(op.condition(), path.current(key).map(|l| l.version())) {
                return Err(Error::ConditionFailed);
            }
            fail::fail_point!("apply-before-gate");
            let gate = self.gate_read();
            let seq = log()?;
            // The path copy lends the siblings' counts (`Path::put_lent`): the loan is paid
            // once the new root is published.
            let weight = match op {
                Op::Put { value, .. } => (self.weigh)(value),
                Op::Delete { .. } => 0,
            };
            let mut lent = match op {
                Op::Put { value, .. } => path.put_lent(key, value, seq, weight),
                Op::Delete { .. } => path.delete_lent(key),
            };
            let Change { existed, size_delta, old_weight, .. } = *lent.change();
            let (keys, weight) = usage_change(op, existed, old_weight, weight);
            self.count_usage(&cell, keys, weight);
            let changed = !lent.change().root.same(&root);
            // The old root's count the loan holds is then the only one besides the cell's.
            drop(root);
            let small = changed && {
                record_change(&cell, op, depth, lent.take_stored());
                self.publish_frame(&cell, size_delta, |cell| lent.publish(|root| cell.publish_taking(root)))?
            };
            drop(gate);
            drop(latch);
            fail::fail_point!("apply-before-merges");
            if small {
                self.try_merge(&cell)?;
            }
            return Ok(Some(ApplyOutcome { version: seq, existed: smallvec![existed] }));
        }
    }
}

impl Tree {
    /// A batch of several ops whose keys all end in one evicted frame, recorded in its change
    /// log while the cache is full (`write_unloaded`); `None`, with nothing latched, logged or
    /// applied, when it cannot be: the caller takes the general path, which loads the frames.
    fn apply_unloaded(
        &self,
        ops: &[Op<'_>],
        check_conditions: bool,
        log: &mut dyn FnMut() -> Result<u64>,
    ) -> Result<Option<ApplyOutcome>> {
        let Some(first) = ops.first().filter(|_| self.pool.is_full_for_writes()) else { return Ok(None) };
        // Where the owner walk goes on from: the frame an evicted frame's image linked to.
        let mut from = None;
        loop {
            let (cell, depth) = self.find_owner_unloaded(first.key(), from.take())?;
            let _latch = cell.latch.lock();
            if cell.is_retired() {
                continue;
            }
            match self.write_unloaded(&cell, ops, depth, check_conditions, log)? {
                Unloaded::Done(outcome) => return Ok(Some(outcome)),
                Unloaded::Descend(child, depth) => from = Some((child, depth)),
                Unloaded::Load => return Ok(None),
            }
        }
    }
}

/// Each key of a batch with its state, as `write_unloaded` reads them before the batch and
/// applies its ops in turn. A batch is one or two ops usually (a rename): those are searched
/// in place, without hashing or allocating.
#[derive(Clone)]
struct KeyStates<'k> {
    states: SmallVec<[(&'k [u8], KeyState); 2]>,
    /// Where each key is in `states`, for a batch of many ops.
    index: Option<HashMap<&'k [u8], usize>>,
}

impl<'k> KeyStates<'k> {
    /// Past this many ops, keys are found by hashing.
    const SEARCHED_MAX: usize = 16;

    fn new(ops: usize) -> Self {
        let index = (ops > Self::SEARCHED_MAX).then(|| HashMap::with_capacity(ops));
        KeyStates { states: SmallVec::with_capacity(ops), index }
    }

    fn get(&self, key: &[u8]) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self.states.iter().position(|(k, _)| *k == key),
        }
    }

    /// The state of `key`, which must be here.
    fn state(&self, key: &[u8]) -> KeyState {
        self.get(key).and_then(|at| self.states[at].1)
    }

    fn insert(&mut self, key: &'k [u8], state: KeyState) {
        match self.get(key) {
            Some(at) => self.states[at].1 = state,
            None => {
                if let Some(index) = &mut self.index {
                    index.insert(key, self.states.len());
                }
                self.states.push((key, state));
            }
        }
    }
}

/// A key's version, weight and value length; `None` if absent.
type KeyState = Option<(u64, u64, usize)>;

/// The most bytes a put of a `value_len`-byte value to `key` (relative to its frame) adds to
/// the frame's encoding over the key's `current` state: a new key's at its widest
/// (`codec::new_key_growth`), or, for a key the frame holds, what its leaf record grows by
/// (the value and its length; the new version's varint taken at its widest, since the
/// version is not assigned yet). An overwrite of a value of the same length grows it by a few
/// bytes, not by the entry: a full frame takes overwrites without loading to split.
fn put_growth(key: &[u8], value_len: usize, current: KeyState) -> usize {
    use crate::format::node::varint_len;
    match current {
        None => codec::new_key_growth(key.len(), value_len),
        Some((version, _, old_len)) => (varint_len(value_len as u64) + value_len + varint_len(u64::MAX))
            .saturating_sub(varint_len(old_len as u64) + old_len + varint_len(version)),
    }
}

/// One op of a batch with its place in the batch, and what the owner search read of its key
/// in the evicted owner's image (`ImageState`), if it did.
type Placed<'b, 'o> = (usize, &'b Op<'o>, Option<ImageState>);

/// What `Tree::plan_unloaded` found for an evicted frame's share of a batch.
enum Plan<'k> {
    /// Every op may be recorded in the frame's change log.
    Record(Recording<'k>),
    /// The first key's path leaves the frame for this linked frame, entered at this depth.
    Descend(Arc<Cell>, usize),
    /// Load the frame and write as usual.
    Load,
}

/// A frame's share of a batch, ready to record unloaded: each key's state before the batch
/// and what each op grows the frame by.
struct Recording<'k> {
    before: KeyStates<'k>,
    growth: SmallVec<[usize; 2]>,
}

/// The checks of `Tree::plan_unloaded` that need no image, made before the write gate is
/// taken: the ops' keys take one path to the evicted frame `cell` (they spell the same
/// bytes down to `depth`), it is evicted, and its subtree holds a key more than the ops
/// delete (so they cannot empty it).
fn may_record_unloaded(cell: &Cell, ops: &[Placed<'_, '_>], depth: usize) -> bool {
    let Some(path) = ops.first().and_then(|(_, op, _)| op.key().get(..depth)) else { return false };
    if ops.iter().any(|(_, op, _)| op.key().get(..depth) != Some(path)) {
        return false;
    }
    // Checked again under the load lock; this spares the gate when it is resident.
    if cell.root.load().is_some() {
        return false;
    }
    let deletes = ops.iter().filter(|(_, op, _)| matches!(op, Op::Delete { .. })).count() as u64;
    deletes == 0 || cell.subtree_usage().0 > deletes
}

/// How `Tree::write_unloaded` ended.
enum Unloaded {
    /// Recorded in the evicted frame's change log.
    Done(ApplyOutcome),
    /// The key's path leaves the frame for this linked frame, entered at this depth.
    Descend(Arc<Cell>, usize),
    /// The frame is resident, the cache has room, or the write may change what the frame's
    /// parent relies on: load the frame and write as usual.
    Load,
}

impl Tree {
    /// Puts and deletes to the evicted frame `cell` (latched; every key enters it at `depth`)
    /// while the cache is full, recorded without loading the frame: each key's current
    /// version is read from the frame's image (the few pages on its path), its deltas and the
    /// writes already recorded this way; the new leaves (or the deletions) go to the frame's
    /// change log, which reads and loads apply on top of the disk state and the next
    /// checkpoint writes as a delta. A full frame image read and decoded per write (the cost
    /// of loading) is what this saves once the frames written to no longer fit the budget; and
    /// a frame loaded by a write stays in memory, dirty, until a checkpoint. A batch of several
    /// ops (a rename is two) is recorded this way when all its keys end in the frame.
    ///
    /// Only writes that keep what the frame's parent relies on, that keep the frame within the
    /// split threshold, and that fit the change log's limit; otherwise `Unloaded::Load`. A put
    /// must not change the frame's lead. A delete cannot change a lead the frame has (the
    /// root's first own byte stays first: see `lead_from_image`); a root without own bytes may
    /// gain some (a child folded into it), and the cell goes on saying it has none until the
    /// frame is loaded, which costs listings only their fast path over the link. Deletes must
    /// not empty the frame, which would need its parent latched to unlink it: they are
    /// recorded only when the frame and the frames below it hold a key more than the batch
    /// deletes. `Unloaded::Descend` when the first key's path leaves the frame; another key's
    /// doing so sends the batch to `Unloaded::Load`.
    fn write_unloaded<'o>(
        &self,
        cell: &Arc<Cell>,
        ops: &[Op<'o>],
        depth: usize,
        check_conditions: bool,
        log: &mut dyn FnMut() -> Result<u64>,
    ) -> Result<Unloaded> {
        let placed: SmallVec<[Placed<'_, 'o>; 2]> =
            ops.iter().enumerate().map(|(at, op)| (at, op, None)).collect();
        if !may_record_unloaded(cell, &placed, depth) {
            return Ok(Unloaded::Load);
        }
        // Held before the load lock: a merge holding the gate may wait for that lock.
        let gate = self.gate_read();
        let done = self.pool.read_image_for_write(cell, |image, deltas| {
            let recording = match self.plan_unloaded(cell, &placed, depth, check_conditions, image, deltas)? {
                Plan::Record(recording) => recording,
                Plan::Descend(child, depth) => return Ok(Unloaded::Descend(child, depth)),
                Plan::Load => return Ok(Unloaded::Load),
            };
            let seq = log()?;
            let mut existed = smallvec![false; ops.len()];
            self.record_planned(cell, &placed, depth, recording, seq, &mut existed);
            Ok(Unloaded::Done(ApplyOutcome { version: seq, existed }))
        })?;
        drop(gate);
        // No eviction pass here: the few bytes a put adds are made room for by the next load,
        // and a pass while dirty frames hold the cache over budget walks the whole ring.
        Ok(done.unwrap_or(Unloaded::Load))
    }

    /// Whether the ops of a batch that end in the evicted frame `cell` (`write_unloaded`)
    /// may be recorded there, after the checks that need the frame's image: each key's
    /// state before the batch is read (from the writes recorded while the frame was evicted,
    /// then its deltas, then the pages of its image on the key's path), and what each op
    /// grows the frame by. Under the frame's latch, the write gate and its load lock, with
    /// the root evicted. `ConditionFailed` when `check_conditions` and a condition fails.
    /// What the owner search read of a key (`Placed`) stands for its image walk while valid.
    fn plan_unloaded<'o>(
        &self,
        cell: &Arc<Cell>,
        ops: &[Placed<'_, 'o>],
        depth: usize,
        check_conditions: bool,
        image: &mut dyn crate::buffer::ImageBody,
        deltas: &[crate::buffer::DeltaRef<'_>],
    ) -> Result<Plan<'o>> {
        let rel = |op: &Op<'o>| -> &'o [u8] { &op.key()[depth..] };
        let mut before = KeyStates::new(ops.len());
        let stamp = cell.generations();
        for (i, &(_, op, read)) in ops.iter().enumerate() {
            let key = rel(op);
            if before.get(key).is_some() {
                continue;
            }
            let read = read.filter(|r| r.stamp == stamp);
            let state = match cell.unloaded_state(key) {
                Some(Some(Node::Leaf(leaf))) => Some((leaf.version(), leaf.weight(), leaf.value().len())),
                Some(None) => None,
                Some(Some(_)) => return Ok(Plan::Load),
                None if read.is_some() => read.and_then(|r| r.state),
                None => match codec::walk_image(image, deltas, op.key(), depth)? {
                    codec::ImageWalk::Found { version, value } => {
                        Some((version, (self.weigh)(&value), value.len()))
                    }
                    codec::ImageWalk::Missing => None,
                    codec::ImageWalk::Link { .. } if i > 0 => return Ok(Plan::Load),
                    codec::ImageWalk::Link { frame, depth } => {
                        // Resolved under the load lock, as a point read resolves its links.
                        let child = self.image_link(cell, image, frame)?;
                        self.pool.count_passing_write(cell);
                        return Ok(Plan::Descend(child, depth));
                    }
                },
            };
            before.insert(key, state);
        }
        // Under the latch and the load lock with the root evicted: nothing publishes the
        // lead, so it is the frame's current one (writes recorded this way keep it).
        // A size of 0 is not known (a listing may have learnt the lead alone); a size the
        // manifest gave at open comes without the lead, which the image then tells.
        let lead = match cell.known_lead().filter(|_| cell.size_bytes() > 0) {
            Some(lead) => lead,
            // Not loaded since open, no write recorded: the frame is its image and deltas,
            // which give the lead and a bound of the size, unless the deltas may change the
            // lead (then the frame is loaded once; its lead is known from then on).
            None if !cell.has_unloaded_changes() => match codec::image_and_deltas(image, deltas)? {
                (keeper, size) if keeper.kept() => {
                    cell.learn_image(keeper.image_lead(), size);
                    keeper.image_lead()
                }
                _ => return Ok(Plan::Load),
            },
            None => return Ok(Plan::Load),
        };
        let changes = || ops.iter().map(|&(_, op, _)| (rel(op), op.value().map_or(0, <[u8]>::len)));
        let puts_lead =
            |op: &Op<'o>| op.value().is_none() || lead.is_none_or(|lead| rel(op).first() == Some(&lead));
        // What each op adds to the frame's size, over the state the ops before it left
        // (a version not assigned yet counted at its narrowest, so the growth over it is
        // counted at its widest).
        let mut growth: SmallVec<[usize; 2]> = SmallVec::with_capacity(ops.len());
        let mut states = before.clone();
        for &(_, op, _) in ops {
            let (key, value_len) = (rel(op), op.value().map(<[u8]>::len));
            growth.push(value_len.map_or(0, |len| put_growth(key, len, states.state(key))));
            states.insert(key, value_len.map(|len| (0, 0, len)));
        }
        let grown: usize = growth.iter().sum();
        if !ops.iter().all(|&(_, op, _)| puts_lead(op))
            || cell.size_bytes() + grown > self.frame_budget_bytes
            || !cell.can_record_unloaded(changes())
        {
            return Ok(Plan::Load);
        }
        if check_conditions
            && !ops
                .iter()
                .all(|&(_, op, _)| condition_holds(op.condition(), before.state(rel(op)).map(|s| s.0)))
        {
            return Err(Error::ConditionFailed);
        }
        Ok(Plan::Record(Recording { before, growth }))
    }

    /// Records in the evicted frame `cell`'s change log the ops `plan_unloaded` planned, as
    /// logged with sequence number `seq`, in order (an op sees what the ones before it left);
    /// sets each op's entry of `existed` (indexed by its place in the batch). Under the same
    /// locks as the plan, held since.
    fn record_planned(
        &self,
        cell: &Arc<Cell>,
        ops: &[Placed<'_, '_>],
        depth: usize,
        recording: Recording<'_>,
        seq: u64,
        existed: &mut [bool],
    ) {
        let Recording { before: mut now, growth } = recording;
        for (&(at, op, _), growth) in ops.iter().zip(growth) {
            let (key, value) = (&op.key()[depth..], op.value());
            let current = now.state(key);
            let weight = value.map_or(0, |v| (self.weigh)(v));
            // A delete of a key the frame does not hold changes nothing: logged, not recorded.
            if value.is_some() || current.is_some() {
                let state = value.map(|v| Node::Leaf(Shared::new(Leaf::new(&[], v, seq, weight))));
                let memory = state.as_ref().map_or(0, |s| s.footprint().memory.max(0) as usize);
                let grown = cell.record_unloaded(key, state, value.map_or(0, <[u8]>::len), growth, memory);
                cell.mark_dirty();
                self.pool.resized(grown as i64);
                self.pool.count_unloaded_write();
            }
            let (keys, weight_change) =
                usage_change(op, current.is_some(), current.map_or(0, |s| s.1), weight);
            self.count_usage(cell, keys, weight_change);
            existed[at] = current.is_some();
            // `now` holds keys of `ops`, which outlive it: the key is found there, not inserted.
            if let Some(i) = now.get(key) {
                now.states[i].1 = value.map(|v| (seq, weight, v.len()));
            }
        }
    }

    /// Counts a write's change (`usage_change`) in frame `cell`: the keys it added or
    /// removed in the tree's count, and keys and weight in the subtree totals of `cell` and of
    /// every frame above it (`FrameCell::subtree_usage`). Called under the write gate, so a
    /// checkpoint's capture sees every published write counted. An overwrite of the same
    /// weight leaves every count alone: no write to a line every writer shares.
    fn count_usage(&self, cell: &Arc<Cell>, keys: i64, weight: i64) {
        if keys != 0 {
            self.keys.fetch_add(keys, std::sync::atomic::Ordering::Relaxed);
        }
        if keys != 0 || weight != 0 {
            self.add_subtree_usage(cell, keys, weight);
        }
    }
}

/// Whether a put of `key` (whose path enters the frame at `key[depth..]`) may change the
/// first byte of the frame's root `root` (see `parents_needed`).
fn may_change_lead(root: &Node, key: &[u8], depth: usize) -> bool {
    first_own_byte(root).is_some_and(|lead| key.get(depth) != Some(&lead))
}

/// Records in `cell`'s change log what `op` did to its key, which enters the frame at
/// `depth`; `stored` is the leaf a put stored (`Change::stored`).
fn record_change(cell: &Cell, op: &Op<'_>, depth: usize, stored: Option<Shared<Leaf>>) {
    let key = &op.key()[depth..];
    match (op, stored) {
        (Op::Put { value, .. }, Some(leaf)) => cell.record_change(key, Some(Node::Leaf(leaf)), value.len()),
        (Op::Put { .. }, None) => {
            // Never met: a put stores a leaf. Recorded as nothing, not as a deletion: the
            // frame is written whole.
            debug_assert!(false, "a put stored no leaf");
            cell.rewrite_whole();
        }
        (Op::Delete { .. }, _) => cell.record_change(key, None, 0),
    }
}

/// What `op` changes in the counts: keys (see `key_count_change`) and weight, given whether
/// its key was present (`existed`) with a value of weight `old_weight`, and a put's new
/// value's `weight`.
fn usage_change(op: &Op<'_>, existed: bool, old_weight: u64, weight: u64) -> (i64, i64) {
    let old = if existed { old_weight.min(WEIGHT_MAX) as i64 } else { 0 };
    let weight = match op {
        Op::Put { .. } => weight.min(WEIGHT_MAX) as i64 - old,
        Op::Delete { .. } => -old,
    };
    (key_count_change(op, existed), weight)
}

/// How an op that found its key present (`existed`) or not changes the tree's key count.
fn key_count_change(op: &Op<'_>, existed: bool) -> i64 {
    match (op, existed) {
        (Op::Put { .. }, false) => 1,
        (Op::Delete { .. }, true) => -1,
        _ => 0,
    }
}

/// Keys and links a frame root holds directly: a write must delete at least this many to
/// leave the frame empty.
fn holdings(root: &Node) -> usize {
    match root {
        Node::Inner(inner) => inner.children().len() + usize::from(inner.terminal().is_some()),
        _ => 1,
    }
}

/// Links between `cell` and the root frame.
fn frame_depth(cell: &Arc<Cell>) -> usize {
    let mut depth = 0;
    let mut at = cell.parent();
    while let Some(parent) = at {
        depth += 1;
        at = parent.parent();
    }
    depth
}

/// What a batch's attempts carry from one to the next.
struct Attempts {
    /// Evicted frames the batch must load rather than record its writes in.
    refused: HashSet<FrameId>,
    /// What the owner search read of each op's key in its evicted owner (`ImageState`), by
    /// place in the batch: found again on each attempt.
    states: Vec<Option<ImageState>>,
}

/// How a latched attempt at a batch ended.
enum Attempt {
    /// Applied and published; the frames that shrank below the merge threshold.
    Done(ApplyOutcome, Vec<Arc<Cell>>),
    /// A frame was split or merged since the owners were found: find them again.
    Retry,
    /// The batch may change the first byte of a frame whose parent frame is not latched
    /// (nothing was logged or applied): latch these as well and try again.
    LatchParents(Vec<Arc<Cell>>),
}
