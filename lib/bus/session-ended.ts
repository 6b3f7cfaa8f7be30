/**
 * Why a request's work was stopped, or a handler's wait for the client failed, when its session
 * ended (DELETE, or expiry, on any instance: the bus's `ended` message). A type of its own, so
 * that the wires tell it from other aborts by its class, never by its message.
 */
export class SessionEndedError extends Error {
  constructor () {
    super('session ended')
    this.name = 'SessionEndedError'
  }
}
