package testserver

import "sync"

// Load runs send(w, i), for i = 0, 1, …, on each of workers goroutines (w
// is the goroutine's number) until stop returns, which waits for them to
// end: a steady load beside a test's faults.
func Load(workers int, send func(w, i int)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				send(w, i)
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
