package profiles

// A PDS host's request slots (Config.PerHost) are handed from job to job
// here, so a worker never waits for one: a job whose host has no slot
// free is parked, and the worker whose request there ends runs it
// (Service.hostFetches, Service.parked).

// maxParkedPerSlot bounds the jobs parked behind one PDS host, per
// request slot of the host; Config.QueueSize bounds the jobs parked
// behind all hosts together.
const maxParkedPerSlot = 8

// takeHost takes one of host's PerHost request slots for j, the one
// handed to it if it was woken for host (outcome ""); else it parks j
// behind the requests in flight there (outcomeParked), or drops it when
// too many are parked (outcomeQueueFull). A slot handed to j for another
// host goes to the next job parked there (woken).
func (s *Service) takeHost(host string, j *job) (o outcome, woken []*job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.slot == host {
		j.slot = ""
		return "", nil
	}
	if j.slot != "" {
		woken = s.handOnLocked(j.slot)
		j.slot = ""
	}
	if s.hostFetches[host] >= s.cfg.PerHost {
		if len(s.parked[host]) >= maxParkedPerSlot*s.cfg.PerHost || s.parkedJobs >= s.cfg.QueueSize {
			return outcomeQueueFull, woken
		}
		s.parked[host] = append(s.parked[host], j)
		s.parkedJobs++
		return outcomeParked, woken
	}
	s.hostFetches[host]++
	return "", woken
}

// releaseHost lets a slot of host go: to the oldest job parked behind it,
// which the caller runs (woken), else back to the host.
func (s *Service) releaseHost(host string) (woken []*job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handOnLocked(host)
}

// dropSlot lets go the slot handed to j if it did not use it.
func (s *Service) dropSlot(j *job) (woken []*job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.slot == "" {
		return nil
	}
	host := j.slot
	j.slot = ""
	return s.handOnLocked(host)
}

// handOnLocked gives a taken slot of host to its oldest parked job, or
// back to the host. s.mu is held.
func (s *Service) handOnLocked(host string) []*job {
	if q := s.parked[host]; len(q) > 0 {
		j := q[0]
		q[0] = nil
		s.parkedJobs--
		if len(q) == 1 {
			delete(s.parked, host)
		} else {
			s.parked[host] = q[1:]
		}
		j.slot = host
		return []*job{j}
	}
	if s.hostFetches[host]--; s.hostFetches[host] <= 0 {
		delete(s.hostFetches, host)
	}
	return nil
}
