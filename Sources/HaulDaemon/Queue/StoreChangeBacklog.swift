import HaulStore

/// What other daemons of a fleet changed that this daemon has not applied yet: the changes the
/// store's notifications announce, gathered until the queue's next turn to apply them, so that
/// one read brings every changed row (``QueueStore/downloads(ids:)``).
///
/// Each download a notification names was read on its own before: with two daemons, every file
/// one of them ran cost the other two reads of its row (its claim, its end), a third of the
/// fleet's transactions. A pure value: the queue keeps it under a lock of its own, adds to it
/// from the listener's thread and takes it on `work`.
struct StoreChangeBacklog: Sendable {
    /// Downloads to read again, in the order first announced, each once.
    private(set) var ids: [Int64] = []
    private var listed: Set<Int64> = []
    /// The settings changed.
    private(set) var settings = false
    /// Everything is to be read again (changes may have been missed): the ids are read with it.
    private(set) var resync = false
    /// Whether a turn to apply the backlog is on its way (from ``add(_:)`` answering `true`
    /// until ``take()``).
    private var isScheduled = false

    /// What a turn applies: the settings first, then every download listed (all of them when
    /// `resync`).
    struct Turn: Equatable {
        var settings: Bool
        var resync: Bool
        var ids: [Int64]
    }

    /// Notes `change`. `true` when the caller must schedule a turn (``take()``): the first change
    /// since the last turn; `false` when one is on its way and will see this change too.
    mutating func add(_ change: QueueStoreChange) -> Bool {
        switch change {
        case .download(let id):
            if !self.resync, self.listed.insert(id).inserted { self.ids.append(id) }
        case .settings:
            self.settings = true
        case .resync:
            self.resync = true
            self.ids = []
            self.listed = []
        }
        defer { self.isScheduled = true }
        return !self.isScheduled
    }

    /// Everything noted since the last turn; the backlog is empty afterwards, and the next
    /// change schedules a turn again.
    mutating func take() -> Turn {
        defer { self = StoreChangeBacklog() }
        return Turn(settings: self.settings, resync: self.resync, ids: self.ids)
    }
}
